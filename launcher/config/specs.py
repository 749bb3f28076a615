"""Worker specs and pools: what runs in each process, and how processes group into cells."""

from __future__ import annotations

import re
import string
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ENTRYPOINT_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
POOL_ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
PORT_NAME_RE = re.compile(r"^[A-Za-z_]\w*$")
GPU_ENV_VAR = "CUDA_VISIBLE_DEVICES"

# Placeholders every command template may use, besides its declared port names.
TEMPLATE_FIELDS = frozenset(
    {
        "host",  # address of the worker's host as other hosts reach it
        "master_addr",  # address of the cell master host (worker 0)
        "master_port",  # a free port on the cell master host, one per cell (torch.distributed init)
        "pool_id",
        "cell_id",
        "worker_id",
        "rank",  # worker index in its cell
        "world_size",  # workers per cell
        "local_rank",  # index among the cell's workers on the same host
        "gpu_ids",  # comma-separated GPU ids given to this worker ("" for none)
        "num_gpus",
        "python",  # the host's Python executable
        "workdir",  # the host's workdir
    }
)

# Plan values a ServeWorkerSpec may inject into its constructor kwargs.
PLAN_KWARGS = frozenset(
    {"rank", "world_size", "local_rank", "master_addr", "master_port", "gpu_ids", "cell_id", "worker_id", "host"}
    | {"provider_api"}  # the launcher's provider API address (launcher.launch.provider_service)
)

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Strategy(str, Enum):
    """Gang placement strategy for the workers of one cell."""

    PACK = "PACK"  # fewest hosts: the whole cell on one host if it fits, else fill hosts in order
    SPREAD = "SPREAD"  # one worker per host round-robin


class PortScope(str, Enum):
    """Where a named port is allocated."""

    WORKER = "worker"  # one free port per worker, on its host
    CELL = "cell"  # one free port per cell, on the cell master host (e.g. nccl / dist-init port)


def _check_env(env: dict[str, str]) -> dict[str, str]:
    if GPU_ENV_VAR in env:
        raise ValueError(
            f"env must not set {GPU_ENV_VAR}: the placement plan sets it for every process; "
            "declare the host's GPUs with `gpus = [ids]` instead"
        )
    for key in env:
        if not key or "=" in key:
            raise ValueError(f"invalid environment variable name {key!r}")
    return env


def _check_gpus(value: float) -> float:
    if value < 0:
        raise ValueError("gpus must be >= 0")
    if value > 1 and value != int(value):
        raise ValueError("gpus above 1 must be a whole number (fractions share a single GPU)")
    return value


class ReadinessCheck(BaseModel):
    """How the host agent decides a command worker is ready (checked on the worker's host)."""

    model_config = _FROZEN

    kind: Literal["tcp", "http", "none"] = "tcp"
    port: str | None = Field(default=None, description="name of the port to probe (tcp/http)")
    path: str = Field(default="/health", description="HTTP path that must answer 200 (http)")
    probe_host: str = Field(default="127.0.0.1", description="address probed from the worker's host")
    deadline_s: float = Field(default=120.0, gt=0, description="seconds from spawn until ready")

    @model_validator(mode="after")
    def _port_needed(self) -> ReadinessCheck:
        if self.kind != "none" and not self.port:
            raise ValueError(f"readiness kind {self.kind!r} needs `port` (the name of a declared port)")
        if self.kind == "http" and not self.path.startswith("/"):
            raise ValueError("readiness path must start with '/'")
        return self


class _ProcessSpec(BaseModel):
    """What every worker process has: its environment and its GPUs (validated alike for both kinds)."""

    model_config = _FROZEN

    env: dict[str, str] = Field(default_factory=dict)
    gpus: float = Field(default=0.0, description="GPUs per worker; fractions share one GPU (colocation)")

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_env(value)

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: float) -> float:
        return _check_gpus(value)


class ServeWorkerSpec(_ProcessSpec):
    """An actor (class by dotted path ``"pkg.module:Class"``, keyword-only constructor kwargs) hosted in a
    ``python -m runtime.worker`` process."""

    model_config = _FROZEN

    kind: Literal["serve"] = "serve"
    actor_class: str = Field(description="'pkg.module:Class'")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword-only constructor arguments")
    concurrency_groups: dict[str, int] | None = Field(default=None, description="group name -> max concurrency")
    plan_kwargs: tuple[str, ...] = Field(
        default=(),
        description="plan values added to the constructor kwargs, e.g. ['rank', 'world_size', 'master_addr', "
        "'master_port'] for a torch.distributed gang",
    )
    ready_deadline_s: float = Field(default=120.0, gt=0, description="spawn until MILES_ACTOR_READY")
    attach_deadline_s: float = Field(default=120.0, gt=0, description="constructor deadline")

    @field_validator("actor_class")
    @classmethod
    def _dotted(cls, value: str) -> str:
        if not ENTRYPOINT_RE.match(value):
            raise ValueError(f"actor_class must be 'pkg.module:Class', got {value!r}")
        return value

    @field_validator("plan_kwargs")
    @classmethod
    def _plan_kwargs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(value) - PLAN_KWARGS)
        if unknown:
            raise ValueError(f"unknown plan_kwargs {unknown}; known: {sorted(PLAN_KWARGS)}")
        return value

    @field_validator("concurrency_groups")
    @classmethod
    def _groups(cls, value: dict[str, int] | None) -> dict[str, int] | None:
        for name, limit in (value or {}).items():
            if limit < 1:
                raise ValueError(f"concurrency group {name!r} must allow at least 1 call, got {limit}")
        return value

    @property
    def port_names(self) -> dict[str, PortScope]:
        """Ports the launcher allocates for this worker (the actor endpoint)."""
        return {"port": PortScope.WORKER}


class CommandWorkerSpec(_ProcessSpec):
    """A process started from a command template (``python -m sglang.launch_server --port {port} ...``), with named
    ports, each allocated free on the target host per worker or once per cell (on the cell master host), and a
    readiness check (TCP connect or HTTP GET path) with a deadline."""

    model_config = _FROZEN

    kind: Literal["command"] = "command"
    command: str = Field(description="split shell-style after formatting; no pipes (wrap in `sh -c` if needed)")
    ports: dict[str, PortScope] = Field(default_factory=lambda: {"port": PortScope.WORKER})
    ready: ReadinessCheck = Field(default_factory=lambda: ReadinessCheck(kind="tcp", port="port"))
    stop_grace_s: float = Field(default=10.0, ge=0, description="SIGTERM to SIGKILL on stop")
    metrics_port: str | None = Field(
        default=None, description="name of a declared port serving Prometheus /metrics (listed for discovery)"
    )
    announce: str | None = Field(
        default=None, description="a console line said once the worker is ready: {host} and its ports filled in"
    )

    @model_validator(mode="after")
    def _template(self) -> CommandWorkerSpec:
        for name in self.ports:
            if not PORT_NAME_RE.match(name) or name in TEMPLATE_FIELDS:
                raise ValueError(f"invalid port name {name!r} (identifier, not one of the built-in fields)")
        known = TEMPLATE_FIELDS | set(self.ports)
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(self.command) if f is not None]
        except ValueError as exc:
            raise ValueError(f"command template is malformed: {exc}") from None
        for name in fields:
            if name not in known:
                raise ValueError(
                    f"command uses unknown placeholder {{{name}}}; known: {sorted(known)} "
                    "(declare ports in `ports`; escape braces as {{ }})"
                )
        if not self.command.strip():
            raise ValueError("command is empty")
        if self.ready.port is not None and self.ready.port not in self.ports:
            raise ValueError(f"ready.port {self.ready.port!r} is not a declared port ({sorted(self.ports)})")
        announced = string.Formatter().parse(self.announce or "")
        unknown = sorted({f for _, f, _, _ in announced if f is not None} - {"host", *self.ports})
        if unknown:
            raise ValueError(f"announce uses unknown placeholder(s) {unknown}; known: host and {sorted(self.ports)}")
        if self.metrics_port is not None and self.metrics_port not in self.ports:
            raise ValueError(f"metrics_port {self.metrics_port!r} is not a declared port ({sorted(self.ports)})")
        return self

    @property
    def port_names(self) -> dict[str, PortScope]:
        """Named ports and their scope."""
        return dict(self.ports)


WorkerSpec = Annotated[ServeWorkerSpec | CommandWorkerSpec, Field(discriminator="kind")]


class PoolSpec(BaseModel):
    """A pool of ``cells`` cells, each a gang of ``workers_per_cell`` identical workers of one spec (a trainer with N
    ranks, an engine with its TP ranks, ...). Cell ids are ``"{pool_id}-{index}"``, worker ids
    ``"{pool_id}-{index}-{worker}"``."""

    model_config = _FROZEN

    id: str
    cells: int = Field(default=1, ge=1)
    workers_per_cell: int = Field(default=1, ge=1)
    strategy: Strategy = Strategy.PACK
    worker: WorkerSpec
    hosts: tuple[str, ...] | None = Field(default=None, description="restrict placement to these hosts")
    colocate_with: str | None = Field(
        default=None, description="pool id whose worker (i, j) shares host and GPUs with ours (fractional)"
    )
    min_gpu_id: int = Field(
        default=0, ge=0, description="place on GPU ids >= this only (e.g. SGLang's base_gpu_id: lower ids stay free)"
    )

    @field_validator("id")
    @classmethod
    def _pool_id(cls, value: str) -> str:
        if not POOL_ID_RE.match(value):
            raise ValueError(f"pool id must match {POOL_ID_RE.pattern}, got {value!r}")
        return value

    def cell_id(self, index: int) -> str:
        """The cell id ``{pool_id}-{index}``."""
        return f"{self.id}-{index}"

    def worker_id(self, index: int, worker: int) -> str:
        """The worker id ``{pool_id}-{index}-{worker}``."""
        return f"{self.id}-{index}-{worker}"
