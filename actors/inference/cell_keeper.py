"""The inference controller's cell keeper: start, health-check, restart and dispose its engine cells.

Split from the controller so that its engines' lives are kept in one place; states and their transitions:
:mod:`actors.inference.cells`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any

from actors.inference.cells import LIVE_STATES, CellState, EngineCell
from actors.inference.engine_client import EngineClient
from actors.inference.engine_launcher import EngineLauncher, EngineSpec
from actors.inference.errors import EngineRequestError, InferenceError
from actors.router import RouterError, RouterProcess

EXIT_POLL_S = 0.2  # how often an engine being registered again is checked for having exited

if TYPE_CHECKING:
    import aiohttp

    from actors.inference.controller_settings import ControllerSettings
    from actors.inference.router_keeper import RouterKeeper
    from actors.inference.router_pool import PoolRouterKeeper
    from actors.inference.update_lock import UpdateLock
    from actors.inference.weights_cache import WeightsCache

logger = logging.getLogger(__name__)

RESTART_BACKOFF_S = 0.5


class CellKeeper:
    """Keeps the controller's engine cells: starts them with its launcher, watches their health, restarts or disposes
    them, and keeps the serving ones registered with its router (which it starts again if it dies)."""

    def __init__(
        self,
        settings: ControllerSettings,
        cells: list[EngineCell],
        weights: WeightsCache,
        lock: UpdateLock,
        released: AbstractSet[str],
    ) -> None:
        """``cells``: the controller's list (replaced in place when a launcher pool is adopted); ``weights``: the
        copy a (re)started engine is restored from; ``lock``: the weight-update lock, held while an engine catches
        up; ``released``: the memory tags released on every engine (the memory releaser's: read here)."""
        self.settings = settings
        self.cells = cells
        self._weights = weights
        self._lock = lock
        self._released = released
        self.tasks: set[asyncio.Task[Any]] = set()  # cell keepers and resyncs, cancelled by stop()
        self.router: RouterProcess | None = None  # set by start(), replaced when the router is started again
        self._closing = False
        self._routers: RouterKeeper | PoolRouterKeeper | None = None
        self._launcher: EngineLauncher | None = None
        self._session: aiohttp.ClientSession | None = None
        self._router_ready = asyncio.Event()  # engines adopted from the launcher are ready before the router
        self._watcher: asyncio.Task[None] | None = None

    async def start(
        self, launcher: EngineLauncher, session: aiohttp.ClientSession, routers: RouterKeeper | PoolRouterKeeper
    ) -> None:
        """Start the router and every cell's engine; returns once each serves, waits for weights or is disposed."""
        self._launcher, self._session, self._routers = launcher, session, routers
        await routers.start()
        self.router = routers.process
        cell_tasks = [asyncio.ensure_future(self._keep_cell(cell, reason=None)) for cell in self.cells]
        self.tasks.update(cell_tasks)  # cancelled by stop(), even if the router fails to start
        await routers.wait_ready()
        self._router_ready.set()
        self._watcher = asyncio.create_task(self._watch(), name=f"{self.settings.server_id}-health")
        await asyncio.gather(*cell_tasks)
        self.tasks.difference_update(cell_tasks)

    def stop(self) -> list[asyncio.Task[Any]]:
        """Restart nothing from now on; returns the keeper's running tasks, for the caller to cancel."""
        self._closing = True
        return [t for t in [self._watcher, *self.tasks] if t is not None]

    def background(self, coro: Awaitable[None], name: str) -> None:
        """Run ``coro`` as one of the keeper's tasks (cancelled by stop())."""
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def on_all(
        self, cells: list[EngineCell], action: Callable[[EngineCell], Awaitable[None]], what: str
    ) -> list[EngineCell]:
        """Run ``action`` on every cell at once; restart cells that fail, raise on a refusal; the survivors."""
        results = await asyncio.gather(*(action(cell) for cell in cells), return_exceptions=True)
        survivors: list[EngineCell] = []
        refusals: list[str] = []
        for cell, result in zip(cells, results, strict=True):
            if isinstance(result, asyncio.CancelledError):
                raise result
            if not isinstance(result, BaseException):
                survivors.append(cell)
            elif _is_refusal(result):
                refusals.append(str(result))
            else:
                self.fail(cell, result)
        if refusals:
            raise InferenceError(f"server {self.settings.server_id}: {what} refused: " + "; ".join(refusals))
        return survivors

    def _restart(self, cell: EngineCell, reason: str) -> None:
        """Take ``cell`` out of service and start a new engine for it (in the background)."""
        if cell.busy or self._closing or cell.state == CellState.DISPOSED:
            return
        cell.move(CellState.INITIALIZING, error=reason)
        logger.warning("%s failed: %s", cell.where(), reason)
        task = asyncio.create_task(self._keep_cell(cell, reason), name=f"restart-{cell.cell_id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _keep_cell(self, cell: EngineCell, reason: str | None) -> None:
        """(Re)start the cell's engine until it serves or waits for weights; dispose it when out of restarts.

        Each cell is kept by one task at a time (``cell.busy``): it launches the engine, brings it to the current
        weights under the update lock (or leaves it pending weights) and registers it with the router; after
        ``max_restarts`` failed starts the cell is disposed."""
        cell.busy = True
        try:
            while not self._closing:
                try:
                    await self._launch(cell, reason)
                    return
                except (asyncio.CancelledError, KeyboardInterrupt):
                    raise
                except Exception as exc:
                    cell.move(CellState.INITIALIZING, error=str(exc))
                    logger.error("%s: %s", cell.where(), exc)
                    if cell.restarts >= self.settings.max_restarts:
                        await self._dispose(cell, f"out of restarts ({self.settings.max_restarts}); last error: {exc}")
                        return
                    reason = str(exc)
                    await asyncio.sleep(RESTART_BACKOFF_S)
        finally:
            cell.busy = False

    async def _launch(self, cell: EngineCell, reason: str | None) -> None:
        assert self._launcher is not None and self._session is not None
        if cell.launched:
            cell.restarts += 1
            logger.warning(
                "restarting %s (restart %d of %d): %s", cell.where(), cell.restarts, self.settings.max_restarts, reason
            )
        cell.launched = True
        await self._retire(cell)
        cell.move(CellState.INITIALIZING)
        cell.weight_version, cell.health_failures = None, 0
        spec = EngineSpec(
            cell_id=cell.cell_id,
            index=cell.index,
            incarnation=cell.restarts,
            kind=self.settings.engine,
            sglang=self.settings.sglang,
            model=self.settings.model if self.settings.engine == "cpu" else None,
            weight_version=self.settings.initial_weight_version if self.settings.engine == "cpu" else None,
            cpu_args=self.settings.cpu_engine_args,
        )
        cell.process = await self._launcher.launch(spec, timeout_s=self.settings.engine_start_timeout_s)
        cell.client = EngineClient(self._session, cell_id=cell.cell_id, url=cell.process.url, kind=self.settings.engine)
        await self.catch_up(cell)

    async def catch_up(self, cell: EngineCell) -> None:
        """Bring a running engine to the current weights and register it, or leave it pending weights.

        Runs under the update lock, so an update cannot start between restoring and registering.
        """
        assert cell.client is not None
        if not await self._lock.acquire(self.settings.update_lock_timeout_s):
            cell.move(CellState.PENDING_WEIGHTS)  # the update's end catches it up
            return
        try:
            if not self._weights.restorable:
                cell.move(CellState.PENDING_WEIGHTS)
                logger.info("%s waits for weights (no restorable copy of %s)", cell.where(), self._weights.version)
                return
            await self._weights.replay(cell.client, timeout_s=self.settings.update_timeout_s)
            cell.weight_version = self._weights.version
            await self._release_like_others(cell)
            await self.register(cell)
        finally:
            self._lock.release()

    async def _release_like_others(self, cell: EngineCell) -> None:
        """A (re)started engine holding the current weights: release what the others have released."""
        if self._released and cell.client is not None:
            await cell.client.memory("release", sorted(self._released), timeout_s=self.settings.request_timeout_s)

    async def register(self, cell: EngineCell) -> None:
        await self._router_ready.wait()
        assert self.router is not None and cell.url is not None
        cell.router_worker_id = await asyncio.to_thread(
            self.router.add_worker, cell.url, timeout_s=self.settings.router.add_worker_timeout_s
        )
        cell.move(CellState.SERVING)
        logger.info("%s serves weights %s (router worker %s)", cell.where(), cell.weight_version, cell.router_worker_id)

    async def unregister(self, cell: EngineCell) -> None:
        """Remove the cell's engine from the router (errors are logged: the router drops dead workers anyway)."""
        worker_id, cell.router_worker_id = cell.router_worker_id, None
        if worker_id and self.router is not None:
            try:
                await asyncio.to_thread(self.router.remove_worker, worker_id, timeout_s=self.settings.request_timeout_s)
            except RouterError as exc:
                logger.warning("%s: removing router worker %s failed: %s", cell.where(), worker_id, exc)

    async def _retire(self, cell: EngineCell) -> None:
        """Remove the cell's engine from the router and kill it (it is dead or failing)."""
        await self.unregister(cell)
        process, cell.process, cell.client = cell.process, None, None
        if process is not None:
            code = await process.kill()
            logger.info("engine %s at %s (pid %s) retired, exit code %s", cell.cell_id, process.url, process.pid, code)

    async def _dispose(self, cell: EngineCell, reason: str) -> None:
        await self._retire(cell)
        cell.move(CellState.DISPOSED, error=reason)
        logger.error("engine %s disposed: %s", cell.cell_id, reason)

    async def _watch(self) -> None:
        """Every health_check_interval_s: restart engines that exited or failed ``health_failure_threshold`` checks
        in a row, and start the router again if it died."""
        while True:
            await asyncio.sleep(self.settings.health_check_interval_s)
            watched = [c for c in self.cells if c.state in LIVE_STATES and not c.busy and c.process is not None]
            await asyncio.gather(*(self._check(cell) for cell in watched))
            if self.router is not None and not self.router.is_running() and not self._closing:
                await self._restart_router()

    async def _restart_router(self) -> None:
        """The router died: start it again (the controller's own on its ports; the launcher's router cell on its
        host, new ports) and register every serving engine with it."""
        assert self._routers is not None
        try:
            self.router = await self._routers.restart()
        except RouterError as exc:
            logger.error("server %s: the router could not be started again: %s", self.settings.server_id, exc)
            return
        serving = [cell for cell in self.cells if cell.state == CellState.SERVING and not cell.busy]
        await asyncio.gather(*(self._register_again(cell) for cell in serving))

    async def _register_again(self, cell: EngineCell) -> None:
        """Register a serving engine with the restarted router; one that exited (before or while the router waits
        for it to be healthy, up to add_worker_timeout_s) is restarted instead, at once."""
        cell.router_worker_id = None
        registering = asyncio.ensure_future(self.register(cell))
        try:
            while not registering.done():
                code = cell.process.exit_code() if cell.process is not None else "gone"
                if code is not None:
                    registering.cancel()
                    self._restart(cell, f"{cell.where()} exited (code {code}) while the router came back")
                    return
                await asyncio.wait({registering}, timeout=EXIT_POLL_S)
            registering.result()
        except RouterError as exc:
            self._restart(cell, f"registering with the restarted router failed: {exc}")

    async def _check(self, cell: EngineCell) -> None:
        assert cell.process is not None and cell.client is not None
        code = cell.process.exit_code()
        if code is not None:
            self._restart(cell, f"{cell.where()} (pid {cell.process.pid}) exited with code {code}")
            return
        if self._released:  # an engine without its memory may fail a generating health check: exits still count
            return
        timeout_s = min(self.settings.request_timeout_s, max(1.0, self.settings.health_check_interval_s * 2))
        if await cell.client.healthy(timeout_s=timeout_s):
            cell.health_failures = 0
            return
        cell.health_failures += 1
        if cell.health_failures >= self.settings.health_failure_threshold:
            self._restart(cell, f"{cell.where()} failed {cell.health_failures} health checks in a row")

    def fail(self, cell: EngineCell, exc: BaseException) -> None:
        """An engine failed a control request without refusing it (no answer, 5xx): restart it."""
        self._restart(cell, str(exc))


def _is_refusal(exc: BaseException) -> bool:
    """A 4xx: the engine is fine but refused the request (bad weights, say); restarting would not help."""
    return isinstance(exc, EngineRequestError) and exc.status is not None and 400 <= exc.status < 500
