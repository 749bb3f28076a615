"""The cluster ledger's wire types: what a process asks for, what it is granted, and what it sees of hosts and
placement groups (frozen, registered, checked field by field when they arrive)."""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from transport import register_type

GPU = "GPU"
CPU = "CPU"
Strategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
STRATEGIES: tuple[Strategy, ...] = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
GroupState = Literal["CREATED", "REMOVED", "FAILED"]

RESOURCE_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]{0,63}$")
MAX_RESOURCE_KINDS = 32
MAX_AMOUNT = 1e6
MAX_BUNDLES = 1024
MAX_WAIT_S = 3600.0
MAX_ENV = 256
MAX_LAST_LINES = 100  # an exit report's output lines (the launcher sends its last 20)
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class PlacementRefused(ValueError):
    """Nothing fits (or the request names no such host, resource, group or bundle); the message says what is short
    and nothing was reserved."""


class PlacementShort(PlacementRefused):
    """Refused for want of room only: the same request may fit once something is released (``wait_s`` waits)."""


def check_resources(resources: dict[str, float]) -> dict[str, float]:
    """Ray's rules for a resource request: known-shaped names, amounts >= 0, and an amount over 1 a whole number
    (``ray._private.utils``: "Resource quantities >1 must be whole numbers"); zero amounts are dropped."""
    if len(resources) > MAX_RESOURCE_KINDS:
        raise ValueError(f"at most {MAX_RESOURCE_KINDS} kinds of resource, got {len(resources)}")
    for name, amount in resources.items():
        if not RESOURCE_NAME_RE.match(name):
            raise ValueError(f"resource name must match {RESOURCE_NAME_RE.pattern}, got {name[:80]!r}")
        if not math.isfinite(amount) or not 0 <= amount <= MAX_AMOUNT:
            raise ValueError(f"resource {name!r}: the amount must be between 0 and {MAX_AMOUNT:g}, got {amount!r}")
        if amount > 1 and amount != int(amount):
            raise ValueError(f"resource {name!r}: quantities over 1 must be whole numbers, got {amount!r}")
    return {name: float(amount) for name, amount in resources.items() if amount > 0}


@register_type
class ResourceRequest(BaseModel):
    """What one actor holds while it lives: ``resources`` (``{"GPU": 1, "CPU": 2, "disk": 1}``), on ``host``
    (hard, or a preference with ``soft``), spread over hosts (``spread``: the host with most free), or inside
    ``bundle_index`` of placement group ``group_id`` (-1: any bundle with room); else near ``near_host``. Refused at
    once when nothing fits, unless ``wait_s`` asks to wait that long for room."""

    model_config = _FROZEN

    resources: dict[str, float] = Field(default_factory=dict)
    host: str | None = None
    soft: bool = False
    spread: bool = False
    group_id: str | None = None
    bundle_index: int = Field(default=-1, ge=-1, lt=MAX_BUNDLES)
    near_host: str | None = None
    wait_s: float = Field(default=0.0, ge=0, le=MAX_WAIT_S)  # 0: refused at once when nothing fits

    @field_validator("resources")
    @classmethod
    def _resources(cls, value: dict[str, float]) -> dict[str, float]:
        return check_resources(value)


@register_type
class Grant(BaseModel):
    """A reservation: the host (``address`` as other hosts reach it), the GPU ids and the share of each, and what
    else it holds. ``lease_id`` releases it."""

    model_config = _FROZEN

    lease_id: str
    host: str
    address: str
    gpu_ids: list[int]
    gpu_share: float
    resources: dict[str, float]
    group_id: str | None = None
    bundle_index: int = -1


@register_type
class NodeView(BaseModel):
    """One host of the launch: its node id (stable for the launch), whether it is alive (``lost_reason`` when
    not), and its resources in total and free (``GPU`` counted in whole and shared GPUs)."""

    model_config = _FROZEN

    host: str
    node_id: str
    address: str
    alive: bool
    lost_reason: str | None
    total: dict[str, float]
    available: dict[str, float]
    gpu_ids: list[int]


@register_type
class BundleView(BaseModel):
    """One bundle of a placement group: its host and node id, what it reserves and its GPU ids."""

    model_config = _FROZEN

    index: int
    host: str
    node_id: str
    resources: dict[str, float]
    gpu_ids: list[int]


@register_type
class GroupSpec(BaseModel):
    """A placement group to reserve, all bundles or none (Ray's ``placement_group(bundles, strategy, name)``)."""

    model_config = _FROZEN

    bundles: list[dict[str, float]] = Field(min_length=1, max_length=MAX_BUNDLES)
    strategy: Strategy = "PACK"
    name: str = Field(default="", max_length=256)

    @field_validator("bundles")
    @classmethod
    def _bundles(cls, value: list[dict[str, float]]) -> list[dict[str, float]]:
        checked = [check_resources(bundle) for bundle in value]
        empty = [index for index, bundle in enumerate(checked) if not bundle]
        if empty:  # Ray: "Bundles cannot be an empty dictionary" and all-zero bundles are refused too
            raise ValueError(f"bundle {empty[0]} reserves nothing; every bundle needs an amount above 0")
        return checked


@register_type
class GroupView(BaseModel):
    """A placement group as the ledger holds it: CREATED (every bundle reserved), REMOVED, or FAILED (a host of
    it was lost: every bundle was returned); ``reason`` says why it is not CREATED."""

    model_config = _FROZEN

    group_id: str
    name: str
    strategy: Strategy
    state: GroupState
    bundles: list[BundleView]
    reason: str | None = None


@register_type
class LeaseView(BaseModel):
    """Who holds what: a pool worker (``pool:<worker_id>``, for the whole launch) or an actor placed at run time
    (``rt-<n>``), on ``host`` or in a placement group's bundle."""

    model_config = _FROZEN

    lease_id: str
    owner: str
    label: str
    host: str
    resources: dict[str, float]
    gpu_ids: list[int]
    group_id: str | None = None
    bundle_index: int = -1


@register_type
class StartSpec(BaseModel):
    """How to start the actor process of a lease: its label, the spawn ticket line its stdin gets (its token and
    keys: it travels only inside the launch's CURVE channel), extra environment, working directory, whether it
    serves ``/metrics``, and how long it may take to come up."""

    model_config = _FROZEN

    label: str = Field(max_length=200)
    ticket_line: str = Field(max_length=4096, repr=False)
    env: dict[str, str] = Field(default_factory=dict, max_length=MAX_ENV)
    cwd: str | None = Field(default=None, max_length=4096)
    metrics: bool = True
    ready_deadline_s: float = Field(default=60.0, gt=0, le=MAX_WAIT_S)


@register_type
class Started(BaseModel):
    """The actor process of a lease is up: where it serves (as every host reaches it), its pid, boot id and log."""

    model_config = _FROZEN

    lease_id: str
    host: str
    endpoint: str
    pid: int
    boot_id: str
    metrics_port: int | None = None
    log_path: str | None = None


@register_type
class ExitReport(BaseModel):
    """The actor process of a lease is gone: how (``returncode``/``signal``, or its host lost: ``reason``) and what
    it printed last."""

    model_config = _FROZEN

    lease_id: str
    label: str
    host: str
    pid: int | None
    returncode: int | None
    signal: str | None
    reason: str
    last_lines: list[str] = Field(default_factory=list, max_length=MAX_LAST_LINES)

    def describe(self) -> str:
        """``actor Learner (lease rt-7, pid 123) on n1 exited with code 1``, then its last lines."""
        pid = f", pid {self.pid}" if self.pid else ""
        text = f"actor {self.label} (lease {self.lease_id}{pid}) on {self.host} {self.reason}"
        if not self.last_lines:
            return text
        return f"{text}; its last output:\n" + "\n".join(f"  | {line}" for line in self.last_lines)
