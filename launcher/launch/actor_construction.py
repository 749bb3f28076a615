"""Constructing the actors of a start's serve workers: all at once, and the first that fails stops the start."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from typing import Any

from launcher.config.specs import ServeWorkerSpec
from launcher.console.progress import Say
from launcher.errors import WorkerStartError
from launcher.launch.cell_table import CellTable
from launcher.launch.cells import WorkerInfo
from launcher.launch.construction_progress import ConstructionProgress
from launcher.launch.worker_state import WorkerState
from runtime.internals import ClientRuntime

#: How long past its own deadline a construction may take before the launcher gives up on it (its calls carry
#: the deadline; this only bounds a loop that stopped answering).
_GRACE_S = 5.0


class ActorConstruction:
    """One round of constructions (the serve workers of a start); :meth:`run` returns once all are constructed,
    or raises WorkerStartError for the first that failed."""

    def __init__(
        self,
        workers: list[WorkerInfo],
        *,
        table: CellTable,
        kwargs_for: Callable[[WorkerInfo, ServeWorkerSpec], dict[str, Any]],
        curve_dir: str | None,
        deadline: float,
        describe_failure: Callable[[str, list[WorkerInfo]], str],
        save_state: Callable[[], None],
        say: Say,
    ) -> None:
        self.workers = workers
        self.table = table
        self._kwargs_for = kwargs_for
        self._curve_dir = curve_dir
        self._deadline = deadline
        self._describe_failure = describe_failure
        self._save_state = save_state
        self._say = say

    def run(self) -> None:
        """Construct every worker's actor; on the first failure (or an interrupt) cancel the others and raise.

        Each construction is a coroutine on the client runtime's loop (``runtime.internals.attach_async``), not a
        thread: on a failure the start stops at once with its error (traceback, pool, cell, host), the progress line
        says ``failed`` and the constructions still running are cancelled, as on Ctrl-C, so nothing is left running
        that the interpreter would wait for at exit (a thread blocked in a constructor call kept the launcher alive
        for seconds after its teardown). Every worker's state moves (ready -> attached, or failed) in the cell table
        and the state file as the console reports it, so ``miles-launch status`` shows what the console shows."""
        progress = ConstructionProgress([(w.placement.pool_id, w.worker_id) for w in self.workers], self._say)
        loop = ClientRuntime.get().loop
        with self.table.cond:
            for worker in self.workers:
                worker.move_to(WorkerState.CONSTRUCTING)
        self._save_state()
        futures = {asyncio.run_coroutine_threadsafe(self._construct(w), loop): w for w in self.workers}
        pending = set(futures)
        with progress:
            try:
                while pending:
                    timeout = self._deadline + _GRACE_S - time.monotonic()
                    if timeout <= 0:
                        self._give_up(pending, futures, progress)
                    done, pending = concurrent.futures.wait(
                        pending, timeout=timeout, return_when=concurrent.futures.FIRST_COMPLETED
                    )
                    for future in done:
                        self._settle(futures[future], future, progress)
            finally:
                for future in pending:  # a failure, a deadline or Ctrl-C: the others are not waited for
                    future.cancel()

    async def _construct(self, worker: WorkerInfo) -> Any:
        from runtime import internals

        spec = self._spec(worker)
        worker.endpoint = f"tcp://{worker.address}:{worker.port}"
        return await internals.attach_async(
            worker.endpoint,
            spec.actor_class,
            ticket=worker.ticket,
            kwargs=self._kwargs_for(worker, spec),
            name=worker.worker_id,
            concurrency_groups=spec.concurrency_groups,
            deadline_s=max(0.1, min(spec.attach_deadline_s, self._deadline - time.monotonic())),
            host=worker.host,
            curve_dir=self._curve_dir,  # None: plain TCP (CURVE off for this launch)
        )

    def _settle(
        self, worker: WorkerInfo, future: concurrent.futures.Future[Any], progress: ConstructionProgress
    ) -> None:
        pool = worker.placement.pool_id
        exc = None if future.cancelled() else future.exception()
        if exc is None and not future.cancelled():
            with self.table.cond:
                worker.handle = future.result()
                worker.move_to(WorkerState.ATTACHED)  # from constructing only
            progress.constructed(pool, worker.worker_id)
            self._save_state()
            return
        spec = self._spec(worker)
        with self.table.cond:
            worker.fail(f"constructing {spec.actor_class} failed: {exc or 'cancelled'}")
        progress.failed(pool, worker.worker_id)
        self._save_state()
        raise WorkerStartError(self._describe_failure(f"failed to construct their actor ({_where(worker)})", [worker]))

    def _give_up(
        self,
        pending: set[concurrent.futures.Future[Any]],
        futures: dict[concurrent.futures.Future[Any], WorkerInfo],
        progress: ConstructionProgress,
    ) -> None:
        late = [futures[f] for f in pending]
        with self.table.cond:
            for worker in late:
                worker.fail("its actor was not constructed before the start deadline")
        for worker in late:
            progress.failed(worker.placement.pool_id, worker.worker_id)
        self._save_state()
        raise WorkerStartError(self._describe_failure("did not construct their actor before the start deadline", late))

    def _spec(self, worker: WorkerInfo) -> ServeWorkerSpec:
        spec = self.table.config.pool(worker.placement.pool_id).worker
        assert isinstance(spec, ServeWorkerSpec)
        return spec


def _where(worker: WorkerInfo) -> str:
    return f"pool {worker.placement.pool_id}, cell {worker.placement.cell_id}, host {worker.host}"
