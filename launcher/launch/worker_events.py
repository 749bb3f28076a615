"""Worker events: what the host agents report (spawned, ready, exited, output, a lost agent), applied to the cell
table and the cluster ledger."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from launcher.agent import agent_protocol as proto
from launcher.console.progress import Say
from launcher.launch.cell_table import CellTable
from launcher.launch.cells import DeathReport, WorkerInfo
from launcher.launch.worker_state import WorkerState

log = logging.getLogger(__name__)

LogSink = Callable[[str, str], None]  # (stream, prefixed text)
DeathCallback = Callable[[DeathReport], None]

_TARGETS_CHANGE = (proto.EV_READY, proto.EV_NOT_READY, proto.EV_SPAWN_FAILED, proto.EV_EXITED)


class WorkerEvents:
    """The handler of every agent's events (``AgentLink(on_event=events.on_event)``), called on the agents' reader
    threads.

    Each event moves its worker's state (:mod:`launcher.launch.worker_state` refuses what the table does not allow,
    so events that crossed on two agent threads do no harm); a worker that exits while its cell is meant to run (not
    stopped, the provider not closing) makes the cell dead and files a :class:`~launcher.launch.cells.DeathReport`:
    it is logged, its handle is marked dead, and ``on_death`` gets it on a thread of its own."""

    def __init__(
        self,
        table: CellTable,
        *,
        targets_changed: Callable[[], None],
        save_state: Callable[[], None],
        say: Say,
        log_sink: LogSink | None = None,
        on_death: DeathCallback | None = None,
        on_host_lost: Callable[[str, str], object] | None = None,
        other: Callable[[str, dict[str, Any]], bool] | None = None,
    ) -> None:
        self._table = table
        self._targets_changed = targets_changed  # called under the table's lock
        self._save_state = save_state
        self._say = say
        self._log_sink = log_sink
        self._on_death = on_death
        self._on_host_lost = on_host_lost  # (host, reason): the cluster ledger stops placing there
        self._other = other  # events of processes that are not the cells' (actors placed at run time)

    def on_event(self, host: str, event: dict[str, Any]) -> None:
        """Apply one event of ``host``'s agent."""
        ev = event.get("ev")
        if ev == proto.EV_AGENT_LOST:
            self._on_agent_lost(host, event)
            return
        if self._other is not None and self._table.worker(str(event.get("id"))) is None and self._other(host, event):
            return
        with self._table.cond:
            worker = self._table.worker(str(event.get("id")))
            if worker is None or worker.host != host:
                return
            if ev == proto.EV_LOG:
                worker.recent_output.append(str(event.get("text")))
            elif ev == proto.EV_SPAWNED:
                worker.pid, worker.create_time = event.get("pid"), event.get("create_time")
                worker.log_path = event.get("log_path")
                worker.move_to(WorkerState.SPAWNED)  # refused once ready: its ready event came first
            elif ev in (proto.EV_SPAWN_FAILED, proto.EV_NOT_READY):
                worker.fail(str(event.get("error")))
            elif ev == proto.EV_READY:
                self._on_ready(worker, event)
            elif ev == proto.EV_EXITED:
                self._on_exited(worker, event.get("returncode"), _exit_reason(event))
            if ev in _TARGETS_CHANGE:
                self._targets_changed()
            self._table.cond.notify_all()
        if ev == proto.EV_LOG and self._log_sink is not None:
            self._log_sink(str(event.get("stream")), str(event.get("text")))
        if ev in (proto.EV_SPAWNED, proto.EV_READY, proto.EV_SPAWN_FAILED, proto.EV_NOT_READY, proto.EV_EXITED):
            self._save_state()  # `miles-launch status` shows each move as the console reports it

    def _on_ready(self, worker: WorkerInfo, event: dict[str, Any]) -> None:
        line = event.get("line")
        if worker.kind == "serve" and line:
            try:
                info = json.loads(str(line)[len(proto.READY_PREFIX) :].strip())
                worker.boot_id = info.get("boot_id")
                worker.metrics_port = info.get("metrics_port")
            except (ValueError, AttributeError):
                worker.fail(f"unparsable ready line {line!r}")
                return
        worker.move_to(WorkerState.READY)  # from pending or spawned only

    def _on_exited(self, worker: WorkerInfo, returncode: Any, reason: str) -> None:
        """Called under the lock: a worker exited (or its host was lost)."""
        previous = worker.state
        worker.returncode = returncode if isinstance(returncode, int) else None
        worker.move_to(WorkerState.EXITED)
        if worker.stopping or self._table.closing:
            return
        if previous in (WorkerState.PENDING, WorkerState.SPAWNED, WorkerState.READY) and not worker.error:
            worker.error = f"{reason} before it was ready"
        cell = self._table.cell_of(worker)
        if cell is None or not cell.alive:
            return
        cell.alive = False
        report = DeathReport(
            cell_id=cell.cell_id,
            worker_id=worker.worker_id,
            host=worker.host,
            pid=worker.pid,
            returncode=worker.returncode,
            reason=reason,
        )
        cell.death_reason = str(report)
        self._table.deaths.append(report)
        log.error("%s", report)
        if worker.handle is not None and hasattr(worker.handle, "mark_dead"):
            try:
                worker.handle.mark_dead(str(report))
            except Exception:
                log.exception("mark_dead failed for %s", worker.worker_id)
        if self._on_death is not None:
            threading.Thread(target=self._on_death, args=(report,), name="on-death", daemon=True).start()

    def _on_agent_lost(self, host: str, event: dict[str, Any]) -> None:
        with self._table.cond:
            if event.get("closing") or self._table.closing:
                return
            why = str(event.get("reason"))
            self._table.lost_hosts[host] = why
            workers = self._table.running_on(host)
        if self._on_host_lost is not None:
            self._on_host_lost(host, why)
        self._say(f"host {host!r} lost: {why}; its {len(workers)} worker(s) die with its agent", logging.ERROR)
        with self._table.cond:
            reason = f"lost with its host agent ({why})"
            for worker in workers:
                if worker.state is not WorkerState.EXITED:
                    self._on_exited(worker, None, reason)
            self._targets_changed()
            self._table.cond.notify_all()


def _exit_reason(event: dict[str, Any]) -> str:
    if event.get("signal"):
        return f"was killed by {event['signal']}"
    return f"exited with code {event.get('returncode')}"
