"""The launch's placement API as every process of a launch reaches it: its interface (the launcher's cluster ledger
serves it), its address in ``MILES_PLACEMENT_API``, and a handle to it."""

from __future__ import annotations

import inspect
import os
import threading
from typing import Any

from runtime.caller.call_policy import CallPolicy
from runtime.caller.handle import ActorHandle
from runtime.names import service
from runtime.names.service import ServiceAddress, ServiceServer
from runtime.placement.placement_types import (
    ExitReport,
    Grant,
    GroupSpec,
    GroupView,
    LeaseView,
    NodeView,
    ResourceRequest,
    Started,
    StartSpec,
)
from transport.security import FROM_ENV, CurveDir

PLACEMENT_API_ENV = "MILES_PLACEMENT_API"  # set by miles-launch in every worker, job and placed actor
CALL_DEADLINE_S = 30.0
_OUTSIDE = (
    "needs a launch: miles-launch sets MILES_PLACEMENT_API in every process it starts (workers, jobs); outside one, "
    "this process has only its own machine"
)


class PlacementUnavailable(RuntimeError):
    """No launch to ask (not started by miles-launch), or its placement API did not answer; says which and why."""


class PlacementApi:
    """What the launch's cluster ledger answers (the launcher serves an implementation; callers check their
    arguments against these hints before the wire)."""

    def nodes(self) -> list[NodeView]:
        """Every host of the launch, in hosts.toml order: alive or lost, resources in total and free."""
        raise NotImplementedError

    def holders(self) -> list[LeaseView]:
        """Every lease held: pool workers for the launch, and actors placed at run time."""
        raise NotImplementedError

    async def reserve(self, request: ResourceRequest, label: str, owner: str, detached: bool = False) -> Grant:
        """Hold ``request``'s resources for an actor of ``owner`` (PlacementRefused, saying what is short, when
        nothing fits: at once, or after ``request.wait_s``); a detached lease outlives its owner."""
        raise NotImplementedError

    async def start(self, lease_id: str, owner: str, spec: StartSpec) -> Started:
        """Start the actor process of ``owner``'s lease on its host; where it serves, once it is up."""
        raise NotImplementedError

    async def release(self, lease_id: str, owner: str) -> bool:
        """Stop the lease's process, if any, and return its resources."""
        raise NotImplementedError

    async def wait_exit(self, lease_id: str, wait_s: float = 30.0) -> ExitReport | None:
        """How the lease's process ended, once it has (None after ``wait_s``)."""
        raise NotImplementedError

    async def create_group(self, spec: GroupSpec, owner: str, wait_s: float = 0.0, detached: bool = False) -> GroupView:
        """Reserve every bundle of ``spec`` over the launch's hosts, all or none (PlacementRefused saying what is
        short: at once, or after ``wait_s``); a detached group outlives its owner."""
        raise NotImplementedError

    async def remove_group(self, group_id: str, owner: str) -> GroupView:
        """Return every bundle of ``owner``'s group; the actors placed in it are stopped."""
        raise NotImplementedError

    def groups(self) -> list[GroupView]:
        """Every placement group of the launch, created, removed or failed."""
        raise NotImplementedError

    async def renew(self, owner: str) -> None:
        """``owner`` is alive (its runtime says so every second while it holds leases)."""
        raise NotImplementedError


_local: list[ServiceServer] = []  # what this process serves (a launcher): answered without a round trip
_handles: dict[str, ActorHandle] = {}
_lock = threading.Lock()


def serve(api: PlacementApi, *, curve_dir: str | None, open_bind: bool) -> ServiceServer:
    """Serve ``api`` from this process (the launcher), on every interface when ``open_bind`` else on loopback, with
    CURVE when ``curve_dir`` names keys; until it is closed, this process's own calls go to it directly."""
    served = service.serve(api, "placement-api", curve_dir=curve_dir, open_bind=open_bind, what="the placement API")
    with _lock:
        _local.append(served)
    return served


def connect(
    address: ServiceAddress, *, deadline_s: float = CALL_DEADLINE_S, curve_dir: CurveDir = FROM_ENV
) -> ActorHandle:
    """A handle to the placement API at ``address``: each call waits ``deadline_s`` and raises PlacementUnavailable
    naming the endpoint when it does not get through. ``curve_dir``: the launch's client keys (default
    ``MILES_CURVE_DIR``, which the launcher sets everywhere)."""

    def unavailable(method: str, exc: Exception) -> PlacementUnavailable:
        return PlacementUnavailable(
            f"the launch's placement API at {address.endpoint} ({PLACEMENT_API_ENV}) did not answer {method} within "
            f"{deadline_s:g} s: is the launcher still running, and can this host reach it? ({exc})"
        )

    def deadline(method: str, kwargs: dict[str, Any]) -> float:
        if method == "start":
            return deadline_s + kwargs["spec"].ready_deadline_s + 5.0
        if method == "reserve":
            return deadline_s + kwargs["request"].wait_s
        return deadline_s + float(kwargs.get("wait_s") or 0.0)

    policy = CallPolicy(deadline_s=deadline, unavailable=unavailable)
    return service.connect(address, PlacementApi, name="placement-api", policy=policy, curve_dir=curve_dir)


def child_env() -> dict[str, str]:
    """What a process this one spawns needs to reach the launch's placement API (nothing outside a launch)."""
    with _lock:
        served = [server for server in _local if not server.closed]
    if served:
        return {PLACEMENT_API_ENV: served[-1].address("127.0.0.1").to_json()}  # spawned here: on this host
    text = os.environ.get(PLACEMENT_API_ENV, "")
    return {PLACEMENT_API_ENV: text} if text else {}


def api() -> Any:
    """This launch's placement API: the launcher's own instance in the launcher, else a handle to the address in
    ``MILES_PLACEMENT_API`` (one per address; call it as any actor: ``api().nodes().result()``, ``await``)."""
    with _lock:
        _local[:] = [served for served in _local if not served.closed]
        if _local:
            return _local[-1].instance
    text = os.environ.get(PLACEMENT_API_ENV, "")
    if not text:
        raise PlacementUnavailable(f"the placement API {_OUTSIDE}")
    with _lock:
        handle = _handles.get(text)
        if handle is None:
            address = ServiceAddress.from_json(text)
            if address is None:
                raise PlacementUnavailable(
                    f"{PLACEMENT_API_ENV}={text[:200]!r} is not a placement API address: expected JSON "
                    '{"endpoint": "tcp://host:port", "server_key": "<z85 key>" or null} (miles-launch sets it)'
                )
            handle = _handles[text] = connect(address)
        return handle


async def call(method: str, **kwargs: Any) -> Any:
    """Call ``method`` of this launch's placement API with keyword arguments, from the runtime's loop."""
    found = api()
    if isinstance(found, PlacementApi):
        result = getattr(found, method)(**kwargs)
        return await result if inspect.isawaitable(result) else result
    return await found.method(method)(**kwargs)


def nodes(timeout_s: float = CALL_DEADLINE_S) -> list[NodeView]:
    """The launch's hosts (blocking; in async code ``await api().nodes()``)."""
    found = api()
    return found.nodes() if isinstance(found, PlacementApi) else found.nodes().result(timeout=timeout_s)


def groups(timeout_s: float = CALL_DEADLINE_S) -> list[GroupView]:
    """The launch's placement groups (blocking; in async code ``await api().groups()``)."""
    found = api()
    return found.groups() if isinstance(found, PlacementApi) else found.groups().result(timeout=timeout_s)


def holders(timeout_s: float = CALL_DEADLINE_S) -> list[LeaseView]:
    """Who holds what on the launch's hosts (blocking; in async code ``await api().holders()``)."""
    found = api()
    return found.holders() if isinstance(found, PlacementApi) else found.holders().result(timeout=timeout_s)
