"""The cell table: the launch's started cells and their workers, its death reports, restarts and lost hosts."""

from __future__ import annotations

import threading
from typing import Any

from launcher.config.hosts_config import ClusterConfig
from launcher.config.placement import PlacementPlan
from launcher.errors import UnknownPool
from launcher.launch.cells import CellInfo, DeathReport, WorkerInfo
from launcher.launch.worker_state import WorkerState


class CellTable:
    """Started cells by pool and index, their workers by id, and what happened to them.

    One per provider, shared by what drives it: the cell starter registers cells, the agents' events
    (:mod:`launcher.launch.worker_events`) move worker states and append deaths, the provider API
    (:mod:`launcher.launch.provider_service`) reads it. Agent events arrive on reader threads, so every change
    happens under ``table.cond`` (a re-entrant lock; waiting for workers to get ready waits on it)."""

    def __init__(self, config: ClusterConfig, plan: PlacementPlan) -> None:
        self.config = config
        self.plan = plan
        self.cond = threading.Condition(threading.RLock())
        self.deaths: list[DeathReport] = []  # every worker that died while its cell was meant to run, in order
        self.restarts: dict[str, int] = {}  # cell id -> times the provider started it again
        self.lost_hosts: dict[str, str] = {}  # host -> why its agent was lost (until it connects again)
        self.closing = False  # the provider is tearing down: exits are expected, nothing is reported
        self._cells: dict[str, dict[int, CellInfo]] = {}
        self._workers: dict[str, WorkerInfo] = {}

    def register(self, cell: CellInfo) -> None:
        """Add a cell about to start, with its workers (replacing a stopped one of the same index)."""
        with self.cond:
            self._cells.setdefault(cell.pool_id, {})[cell.index] = cell
            for worker in cell.workers:
                self._workers[worker.worker_id] = worker

    def forget(self, cells: list[CellInfo]) -> None:
        """Drop stopped cells and their workers."""
        with self.cond:
            for cell in cells:
                self._cells.get(cell.pool_id, {}).pop(cell.index, None)
                for worker in cell.workers:
                    self._workers.pop(worker.worker_id, None)

    def mark_stopping(self, pool_id: str, indices: list[int] | None) -> list[CellInfo]:
        """The started cells of a pool (all, or those of ``indices``), no longer alive and their workers stopping
        (their exits are not deaths)."""
        with self.cond:
            cells = [c for i, c in self._cells.get(pool_id, {}).items() if indices is None or i in indices]
            for cell in cells:
                cell.alive = False
                for worker in cell.workers:
                    worker.stopping = True
            return cells

    def mark_closing(self) -> None:
        """The provider closes: every cell is no longer alive and every worker stopping."""
        with self.cond:
            self.closing = True
            for worker in self._workers.values():
                worker.stopping = True
            for cells in self._cells.values():
                for cell in cells.values():
                    cell.alive = False

    def cells(self, pool_id: str) -> list[CellInfo]:
        """Started cells of a pool, in index order; UnknownPool if hosts.toml has no such pool."""
        known = [pool.id for pool in self.config.pools]
        if pool_id not in known:
            raise UnknownPool(f"no pool {pool_id!r} in {self.config.source or 'hosts.toml'}; its pools are {known}")
        with self.cond:
            return [c for _, c in sorted(self._cells.get(pool_id, {}).items())]

    def cell_of(self, worker: WorkerInfo) -> CellInfo | None:
        """The started cell a worker belongs to (None once it was stopped)."""
        with self.cond:
            return self._cells.get(worker.placement.pool_id, {}).get(worker.placement.cell_index)

    def worker(self, worker_id: str) -> WorkerInfo | None:
        """A started worker by id."""
        with self.cond:
            return self._workers.get(worker_id)

    def workers(self, pool_id: str | None = None) -> list[WorkerInfo]:
        """Started workers of one pool, or all."""
        with self.cond:
            return [w for w in self._workers.values() if pool_id is None or w.placement.pool_id == pool_id]

    def running_on(self, host: str) -> list[WorkerInfo]:
        """Started workers of ``host`` that have not exited."""
        with self.cond:
            return [w for w in self._workers.values() if w.host == host and w.state is not WorkerState.EXITED]

    def worker_records(self) -> list[tuple[str, str, dict[str, Any]]]:
        """``(host, worker id, record)`` of every worker with a pid, as the state file lists them."""
        records = []
        with self.cond:
            for worker in self._workers.values():
                if worker.pid is None:
                    continue
                placement = worker.placement
                cell = self.cell_of(worker)
                records.append(
                    (
                        worker.host,
                        worker.worker_id,
                        {
                            "pid": worker.pid,
                            "create_time": worker.create_time,
                            "state": worker.state.value,
                            "log_path": worker.log_path,
                            "pool": placement.pool_id,
                            "cell": placement.cell_id,
                            "restarts": self.restarts.get(placement.cell_id, 0),
                            "last_error": worker.error or (cell.death_reason if cell is not None else None),
                        },
                    )
                )
        return records
