"""The ``ray.init`` session of this process: the cluster's ledger, the namespace, what was started for it
(``ray.init()`` is optional, as in Ray: the first ``.remote()`` starts a session with the defaults)."""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from runtime.ray_compat import cluster
from runtime.ray_compat.resources import Ledger, make_ledger
from runtime.ray_compat.task_slots import TaskSlots

log = logging.getLogger(__name__)


@dataclass
class Session:
    ledger: Ledger  # this machine's (its tasks run here)
    namespace: str
    env: dict[str, str]  # runtime_env env_vars of ray.init: every actor and task worker gets them
    cluster: bool = False  # inside a launch: actors and placement groups go on its hosts (runtime.ray_compat.cluster)
    actors: list[Any] = field(default_factory=list)  # the Leases of the actors started here (ended at shutdown)
    pools: dict[Any, Any] = field(default_factory=dict)  # task worker pools, by their env
    groups: list[Any] = field(default_factory=list)  # placement groups
    #: Named actors still being constructed, by (namespace, name): get_actor finds them before they register.
    starting: dict[tuple[str, str], Any] = field(default_factory=dict)
    slots: TaskSlots = field(init=False)  # the CPUs running tasks hold

    def __post_init__(self) -> None:
        self.slots = TaskSlots(self.ledger.total.get("CPU", 1.0))


_lock = threading.Lock()
_session: Session | None = None


def start(
    num_cpus: float | None, num_gpus: float | None, resources: dict[str, float] | None, namespace: str | None,
    env: dict[str, str], *, cluster: bool = False,
) -> Session:  # fmt: skip
    global _session
    with _lock:
        _session = Session(make_ledger(num_cpus, num_gpus, resources), namespace or "", env, cluster=cluster)
        return _session


def current() -> Session:
    """The session, started with the defaults if ``ray.init`` was not called (as Ray does): inside a launch, its
    hosts are the cluster."""
    session = _session
    if session is not None:
        return session
    in_launch = cluster.joined()
    with _lock:
        if _session is None:
            globals()["_session"] = Session(make_ledger(None, None, None), "", {}, cluster=in_launch)
        return _session  # type: ignore[return-value]


def running() -> Session | None:
    return _session


def stop() -> None:
    """Kill what the session started and forget it: the actors it started (not detached ones), the task workers,
    the placement groups (``ray.shutdown()``)."""
    global _session
    with _lock:
        session, _session = _session, None
    if session is None:
        return
    for lease in reversed(session.actors):
        with contextlib.suppress(Exception):
            lease.end()
    for group in list(session.groups):  # a launch's groups are returned to it (this machine's end with the session)
        with contextlib.suppress(Exception):
            group.end()
    session.slots.close(RuntimeError("ray.shutdown() was called while this task waited for CPUs; it never ran"))
    for pool in session.pools.values():
        with contextlib.suppress(Exception):
            pool.stop()
    log.info("ray_compat session stopped: %d actors, %d task pools", len(session.actors), len(session.pools))
