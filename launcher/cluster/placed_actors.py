"""Actors placed at run time: each one's process, started by its host's agent on a lease of the cluster ledger, and
its end (an exit, a kill, its host lost) returned to the ledger and told to whoever waits for it."""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from launcher.agent import agent_protocol as proto
from launcher.agent.agent_commands import Kill, Spawn
from launcher.cluster.ledger import ClusterLedger, Lease
from launcher.config.hosts_config import ClusterConfig
from launcher.errors import LauncherError
from runtime.internals import NAME_SERVICE_ENV
from runtime.placement import PLACEMENT_API_ENV, ExitReport, Started, StartSpec
from transport import session_secret
from transport.security import CURVE_DIR_ENV
from transport.session_secret import SECRET_ENV

log = logging.getLogger(__name__)

LAST_LINES = 20  # what an exit report shows of the actor's output
PLACED_ENV = ("MILES_HOST", "MILES_NODE_ID", "MILES_PLACEMENT_LEASE", "CUDA_VISIBLE_DEVICES")  # only the launcher sets


class AgentsOfLaunch(Protocol):
    """What placing needs of the launch's agents and services (the worker provider gives it)."""

    def link(self, host: str) -> Any: ...

    def python_path(self, host: str) -> list[str]: ...

    def curve_dir(self, host: str) -> str | None: ...

    def name_service_env(self, host: str) -> str: ...

    def placement_api_env(self, host: str) -> str: ...


@dataclass
class _Placed:
    lease: Lease
    label: str
    node_id: str
    pid: int | None = None
    log_path: str | None = None
    started: Started | None = None
    failure: str | None = None
    exit: ExitReport | None = None
    recent: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=LAST_LINES))
    watchers: list[Callable[[], None]] = field(default_factory=list)


class PlacedActors:
    """Starts, watches and stops the processes of run-time leases (thread-safe: the agents' reader threads report
    their events here, the placement API's loop starts and waits)."""

    def __init__(
        self,
        config: ClusterConfig,
        ledger: ClusterLedger,
        agents: AgentsOfLaunch,
        *,
        log_sink: Callable[[str, str], None] | None = None,
    ) -> None:
        self._config = config
        self._ledger = ledger
        self._agents = agents
        self._log_sink = log_sink
        self._lock = threading.Lock()
        self._placed: dict[str, _Placed] = {}

    def launch(self, lease: Lease, spec: StartSpec, *, node_id: str) -> None:
        """Have the lease's host agent start ``python -m runtime.worker`` for it (answered by events: :meth:`watch`)."""
        clash = sorted(set(spec.env) & {*PLACED_ENV, CURVE_DIR_ENV, NAME_SERVICE_ENV, PLACEMENT_API_ENV, SECRET_ENV})
        if clash:
            raise LauncherError(f"{spec.label}: env may not set {clash[0]}: the launcher sets it from the placement")
        host = self._config.host(lease.host)
        paths = [spec.env.get("PYTHONPATH", ""), host.env.get("PYTHONPATH", "")]  # the caller's first, then the host's
        env = {
            "MILES_ADVERTISE_HOST": host.reach_address,
            **host.env,
            **spec.env,
            **({"PYTHONPATH": os.pathsep.join(p for p in paths if p)} if any(paths) else {}),
            CURVE_DIR_ENV: self._agents.curve_dir(host.name) or "",
            NAME_SERVICE_ENV: self._agents.name_service_env(host.name),
            PLACEMENT_API_ENV: self._agents.placement_api_env(host.name),
            SECRET_ENV: session_secret.ensure(),
            "MILES_HOST": host.name,
            "MILES_NODE_ID": node_id,
            "MILES_PLACEMENT_LEASE": lease.lease_id,
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, lease.claim.gpu_ids)),
            "PYTHONUNBUFFERED": "1",
        }
        argv = [host.python, "-m", "runtime.worker", "--bind", f"tcp://{host.actor_bind_host}:0"]
        argv += [] if spec.metrics else ["--no-metrics"]
        ready = {"kind": "line", "prefix": proto.READY_PREFIX, "deadline_s": spec.ready_deadline_s}
        command = Spawn(
            lease.lease_id, argv, env, cwd=spec.cwd or str(host.workdir), ready=ready,
            stream_logs=self._config.launcher.stream_logs, python_path=self._agents.python_path(host.name),
            stdin=spec.ticket_line,
        )  # fmt: skip
        with self._lock:
            self._placed[lease.lease_id] = _Placed(lease, spec.label, node_id)
        try:
            self._agents.link(host.name).send(command)
        except (LauncherError, KeyError) as exc:
            self._end(lease.lease_id, None, None, f"could not be started: host agent unreachable ({exc})")

    def watch(self, lease_id: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` on each change of the lease's process (up, failed, exited); returns its remover."""
        with self._lock:
            placed = self._placed.get(lease_id)
            if placed is not None:
                placed.watchers.append(callback)

        def remove() -> None:
            with self._lock:
                if placed is not None and callback in placed.watchers:
                    placed.watchers.remove(callback)

        return remove

    def state(self, lease_id: str) -> tuple[Started | None, str | None, ExitReport | None]:
        """The lease's process: started (where), failed to start (why), exited (how)."""
        with self._lock:
            placed = self._placed.get(lease_id)
            if placed is None:
                return None, f"no actor process for lease {lease_id!r}", None
            return placed.started, placed.failure, placed.exit

    def kill(self, lease_id: str, grace_s: float = 0.0) -> None:
        """Stop the lease's process tree (its exit ends the lease); a lease without a live process just ends."""
        with self._lock:
            placed = self._placed.get(lease_id)
        link = self._agents.link(placed.lease.host) if placed is not None and placed.exit is None else None
        if link is not None and link.alive:
            link.send(Kill(lease_id, grace_s))
        if link is None or not link.alive:
            self._ledger.release(lease_id)  # no process to wait for (never started, or ended)
        elif placed is not None and placed.failure is not None:  # it failed to start: no exit may ever come
            self._end(lease_id, None, None, f"did not start: {placed.failure}")

    def on_event(self, host: str, event: dict[str, Any]) -> bool:
        """An agent's event for a placed actor: applied, True; any other id: False."""
        lease_id = str(event.get("id"))
        with self._lock:
            placed = self._placed.get(lease_id)
        if placed is None or placed.lease.host != host:
            return False
        ev = event.get("ev")
        if ev == proto.EV_LOG:
            placed.recent.append(str(event.get("text")))
            if self._log_sink is not None:
                self._log_sink(str(event.get("stream")), str(event.get("text")))
            return True
        if ev == proto.EV_SPAWNED:
            placed.pid, placed.log_path = event.get("pid"), event.get("log_path")
        elif ev == proto.EV_READY:
            self._ready(placed, str(event.get("line") or ""))
        elif ev in (proto.EV_SPAWN_FAILED, proto.EV_NOT_READY):
            placed.failure = str(event.get("error"))
        elif ev == proto.EV_EXITED:
            code, sig = event.get("returncode"), event.get("signal")
            why = f"was killed by {sig}" if sig else f"exited with code {code}"
            self._end(lease_id, code if type(code) is int else None, str(sig) if sig else None, why)
            return True
        self._tell(placed)
        return True

    def host_lost(self, host: str, reason: str) -> None:
        """``host``'s agent is gone: its actors end (told to their holders), and the actors elsewhere in placement
        groups that failed with it are stopped."""
        lost = self._ledger.host_lost(host, reason)
        for lease in lost.leases:
            if lease.host == host:
                self._end(lease.lease_id, None, None, f"lost with its host agent ({reason})")
            else:
                self.kill(lease.lease_id)

    def _ready(self, placed: _Placed, line: str) -> None:
        try:
            info = json.loads(line[len(proto.READY_PREFIX) :].strip())
            port = int(str(info["endpoint"]).rsplit(":", 1)[1])
        except (ValueError, KeyError, IndexError, TypeError):
            placed.failure = f"unparsable ready line {line[:200]!r}"
            return
        host = self._config.host(placed.lease.host)
        shown = f"[{host.reach_address}]" if ":" in host.reach_address else host.reach_address
        placed.started = Started(
            lease_id=placed.lease.lease_id, host=host.name, endpoint=f"tcp://{shown}:{port}",
            pid=int(info.get("pid") or placed.pid or 0), boot_id=str(info.get("boot_id")),
            metrics_port=info.get("metrics_port"), log_path=placed.log_path,
        )  # fmt: skip

    def _end(self, lease_id: str, code: int | None, sig: str | None, reason: str) -> None:
        with self._lock:
            placed = self._placed.get(lease_id)
            if placed is None or placed.exit is not None:
                return
            placed.exit = ExitReport(
                lease_id=lease_id, label=placed.label, host=placed.lease.host, pid=placed.pid, returncode=code,
                signal=sig, reason=reason, last_lines=list(placed.recent),
            )  # fmt: skip
        self._ledger.release(lease_id)
        log.info("%s", placed.exit.describe())
        self._tell(placed)

    def _tell(self, placed: _Placed) -> None:
        with self._lock:
            watchers = list(placed.watchers)
        for watcher in watchers:
            watcher()
