"""``ray.init``, ``get``, ``put``, ``wait``, ``kill``, ``cancel``, ``get_actor``, ``nodes``, ``cluster_resources``, with
the signatures of Ray's python/ray/_private/worker.py (``get`` raising GetTimeoutError past ``timeout``)."""

from __future__ import annotations

import logging
import time
from typing import Any

from runtime.caller import waiting as native_wait
from runtime.core.errors import ActorNotFound
from runtime.names import naming
from runtime.names.naming import get_actor as native_get_actor
from runtime.ray_compat import cluster, state
from runtime.ray_compat import options as opts
from runtime.ray_compat.exceptions import GetTimeoutError
from runtime.ray_compat.handles import ActorHandle
from runtime.ray_compat.refs import ObjectRef, ObjectRefGenerator
from runtime.ray_compat.resources import nodes as _nodes

log = logging.getLogger(__name__)

_INIT_REFUSED = {
    "include_dashboard": "there is no dashboard: each actor serves Prometheus /metrics (README: Metrics)",
    "dashboard_host": "there is no dashboard",
    "dashboard_port": "there is no dashboard",
    "object_store_memory": "there is no object store to size: values stay with their owner (runtime.put)",
    "_temp_dir": "nothing is written to a Ray temp dir",
    "storage": "there is no cluster storage",
    "_system_config": "there is no Ray system config",
    "_plasma_directory": "there is no plasma store",
}
_INIT_ACCEPTED = {"log_to_driver", "configure_logging", "logging_format", "_node_ip_address", "local_mode"}


def init(
    address: str | None = None,
    *,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    resources: dict[str, float] | None = None,
    namespace: str | None = None,
    runtime_env: dict[str, Any] | None = None,
    ignore_reinit_error: bool = False,
    logging_level: int | str = logging.INFO,
    **more: Any,
) -> dict[str, Any]:
    """Start the session; returns its context. Inside a launch (a job or actor started by miles-launch),
    ``address`` None or ``"auto"`` joins the launch's cluster: its hosts, their resources, actors and placement
    groups placed across them (:mod:`runtime.ray_compat.cluster`). Otherwise, or with ``address="local"`` or
    ``num_cpus``/``num_gpus``/``resources`` given, this machine's CPUs/GPUs (or the counts given) are the cluster."""
    if address not in (None, "local", "auto"):
        raise NotImplementedError(
            f"ray.init(address={address!r}): there is no Ray cluster to connect to; run the script under "
            "`miles-launch hosts.toml` (its hosts are the cluster: address='auto'), or leave address unset"
        )
    for key, value in more.items():
        if key in _INIT_REFUSED and value not in (None, False):
            raise NotImplementedError(
                f"ray.init({key}=...) is not supported by runtime.ray_compat: {_INIT_REFUSED[key]}"
            )
        if key == "local_mode" and value:
            raise NotImplementedError("ray.init(local_mode=True): actors always run in their own processes here")
        if key not in _INIT_REFUSED and key not in _INIT_ACCEPTED:
            raise TypeError(f"ray.init() got an unexpected keyword argument {key!r}")
    if state.running() is not None:
        if ignore_reinit_error:
            return _context()
        raise RuntimeError("Maybe you called ray.init twice by accident? Pass ignore_reinit_error=True, or shutdown()")
    env, _ = opts.runtime_env(runtime_env, "ray.init")
    if runtime_env and runtime_env.get("working_dir"):
        raise NotImplementedError("ray.init(runtime_env={'working_dir': ...}): give working_dir per actor or task")
    logging.getLogger("runtime").setLevel(logging_level)
    counts = num_cpus is not None or num_gpus is not None or bool(resources)
    in_launch = address != "local" and cluster.joined()
    if in_launch and counts:
        log.info("ray.init with num_cpus/num_gpus/resources: a session of this machine, not the launch's hosts")
    state.start(num_cpus, num_gpus, resources, namespace, env, cluster=in_launch and not counts)
    return _context()


def _context() -> dict[str, Any]:
    if state.current().cluster:
        return {"address": "auto", "node_id": cluster.this_node_id()}
    return {"address": "local", "node_id": _nodes(state.current().ledger)[0]["NodeID"]}


def is_initialized() -> bool:
    return state.running() is not None


def shutdown() -> None:
    state.stop()


def put(value: Any) -> ObjectRef:
    from runtime.objects.object_owner import put as keep

    if isinstance(value, ObjectRef):
        raise TypeError("Calling 'put' on an ray.ObjectRef is not allowed.")
    return ObjectRef(stored=keep(value), what="put")


def get(refs: Any, *, timeout: float | None = None) -> Any:
    """The value of a ref, or the values of a list of refs (in order); GetTimeoutError past ``timeout``."""
    if isinstance(refs, ObjectRefGenerator):
        raise TypeError("ray.get does not take an ObjectRefGenerator; iterate it: for ref in gen: ray.get(ref)")
    single = isinstance(refs, ObjectRef)
    items = [refs] if single else refs
    if not isinstance(items, list) or not all(isinstance(r, ObjectRef) for r in items):
        raise TypeError(f"ray.get takes an ObjectRef or a list of ObjectRefs, got {type(refs).__name__}")
    deadline = None if timeout is None else time.monotonic() + timeout
    values = []
    for ref in items:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            values.append(ref.result(left))
        except TimeoutError as exc:
            if isinstance(exc, GetTimeoutError) or not ref.future.done():
                raise GetTimeoutError(f"Get timed out: some object(s) not ready (timeout={timeout} s)") from None
            raise
    return values[0] if single else values


def wait(
    refs: list[Any], *, num_returns: int = 1, timeout: float | None = None, fetch_local: bool = True
) -> tuple[list[Any], list[Any]]:
    """(ready, not ready), each in the order given; a generator is ready once its next item is there."""
    if not isinstance(refs, list) or not all(isinstance(r, (ObjectRef, ObjectRefGenerator)) for r in refs):
        raise TypeError("wait() expected a list of ray.ObjectRef or ObjectRefGenerator")
    if not refs:
        return [], []
    return native_wait.wait(refs, num_returns=num_returns, timeout=timeout)


def kill(actor: ActorHandle, *, no_restart: bool = True) -> None:
    if not isinstance(actor, ActorHandle):
        raise ValueError(f"ray.kill() only supported for actors. For tasks, try ray.cancel(). Got: {type(actor)}.")
    actor._kill(no_restart)


def cancel(ref: Any, *, force: bool = False, recursive: bool = True) -> None:
    """Cancel a task or actor call, as Ray does. Queued: it never runs. A running task gets KeyboardInterrupt
    (``force``: its worker ends); a running async actor method is cancelled (asyncio); a running sync actor method
    runs on (``force`` raises ValueError for actor calls, as in Ray). ``recursive``: the calls a task made are
    cancelled too. ``ray.get`` of it then raises TaskCancelledError. A stream is closed."""
    if not isinstance(ref, (ObjectRef, ObjectRefGenerator)):
        raise TypeError(f"ray.cancel() only supported for object refs, got {type(ref).__name__}")
    ref.cancel(force, recursive)


def get_actor(name: str, namespace: str | None = None) -> ActorHandle:
    if not isinstance(name, str) or not name:
        raise ValueError("Please supply a non-empty value to get_actor")
    session = state.running()
    space = namespace or (session.namespace if session is not None else "") or naming.DEFAULT_NAMESPACE
    starting = session.starting.get((space, name)) if session is not None else None
    if starting is not None:  # .remote() returned, its constructor still runs: a handle queued behind it
        return ActorHandle(None, lease=starting)
    try:
        return ActorHandle(native_get_actor(name, space))
    except ActorNotFound as exc:
        raise ValueError(f"Failed to look up actor with name '{name}'. {exc}") from None


def nodes() -> list[dict[str, Any]]:
    return cluster.ray_nodes() if state.current().cluster else _nodes(state.current().ledger)


def cluster_resources() -> dict[str, float]:
    return cluster.total() if state.current().cluster else dict(state.current().ledger.total)


def available_resources() -> dict[str, float]:
    return cluster.available() if state.current().cluster else state.current().ledger.available()
