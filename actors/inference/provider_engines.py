"""Engines the launcher placed: an :class:`~actors.inference.engine_launcher.EngineLauncher` over the provider API.

The controller's cell ``i`` is the engine pool's cell ``i``; the launcher restarts it on the controller's word."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from actors.inference.engine_launcher import EngineSpec, wait_ready
from actors.inference.engine_pool import ENGINE_ACTOR
from actors.inference.errors import EngineStartError
from actors.inference.provider_address import worker_url_host
from launcher.launch.cells import DeathReport
from launcher.launch.provider_service import ProviderApiError
from launcher.launch.provider_views import CellView
from runtime import ActorHandle, RemoteError, get_actor_async, within

logger = logging.getLogger(__name__)

DEAD_CODE = -9  # exit_code() of an engine whose cell died without a known return code (e.g. its host was lost)


class ProviderEngineProcess:
    """One incarnation of a launcher-placed engine cell (node 0 serves its HTTP API)."""

    def __init__(
        self, launcher: ProviderEngineLauncher, cell_id: str, view: CellView, *,
        handle: ActorHandle | None = None, port: int | None = None,
    ) -> None:  # fmt: skip
        """``handle``: node 0's actor, for a pool of engine actors, and ``port`` the HTTP port it bound (a command
        worker's is its ``port``)."""
        self._launcher = launcher
        self.cell_id = cell_id
        self.view = view
        self.handle = handle
        worker = view.workers[0]
        self.url = f"http://{worker_url_host(worker, launcher.api)}:{port or worker.ports['port']}"
        self.host = view.host
        self.pids = {w.pid for w in view.workers}
        self.code: int | None = None
        self.since = time.monotonic()  # a poll that began earlier saw an older incarnation of the cell

    @property
    def pid(self) -> int | None:
        return self.view.pid

    @property
    def log_path(self) -> str | None:
        path = self.view.workers[0].log_path
        return f"{self.host}:{path}" if path else None

    def exit_code(self) -> int | None:
        return self.code

    async def stop(self, timeout_s: float = 10.0) -> int | None:
        if self.code is None:
            await self._launcher.stop_cell(self.view.index)
            self.code = DEAD_CODE
        return self.code

    async def kill(self) -> int | None:
        return await self.stop()

    def log_tail(self, lines: int = 20) -> str:
        return f"(log on host {self.host}: {self.log_path}; `miles-launch logs hosts.toml {self.view.cell_id}`)"


# launch() adopts the launcher's cell on the first start if it is alive, else asks for restart_cell (new ports,
# same host and GPUs), then waits for node 0's /health_generate. A background poll of cells and deaths tells each
# engine when its cell died, which the controller's health check sees as exit_code(). A cell on a lost host cannot
# be restarted: the controller disposes it after max_restarts and serves with the rest. An engine on the launcher's
# machine reports a loopback address, reached at the provider API's address (actors.inference.provider_address).
# Engine actors (as_actor=True) are watched the same way, with their handles looked up by worker id in the name
# service (again after a restart) and the HTTP port the actor bound.
class ProviderEngineLauncher:
    """Starts and watches the engine cells of one launcher pool through the provider API."""

    def __init__(self, *, api: ActorHandle, pool: str, poll_interval_s: float = 1.0) -> None:
        """``api``: a handle to the provider API (launcher.launch.provider_service.connect)."""
        self.api = api
        self.pool = pool
        self.poll_interval_s = poll_interval_s
        self._engines: dict[int, ProviderEngineProcess] = {}
        self._deaths_seen = 0
        self._poller: asyncio.Task[None] | None = None

    async def cells(self) -> list[CellView]:
        """The pool's cells as the launcher sees them."""
        return list(await self.api.cells(self.pool))

    async def launch(self, spec: EngineSpec, *, timeout_s: float) -> ProviderEngineProcess:
        """Adopt (first start) or restart the pool's cell ``spec.index`` and wait until node 0 is ready."""
        deadline = time.monotonic() + timeout_s
        try:
            view = (await self.cells())[spec.index]
            if spec.incarnation > 0 or view.state != "alive":
                logger.info("engine %s: asking the launcher to restart %s on %s", spec.cell_id, view.cell_id,
                            view.host)  # fmt: skip
                view = await self.api.restart_cell(pool=self.pool, index=spec.index, deadline_s=timeout_s)
        except (RemoteError, ProviderApiError, IndexError) as exc:
            raise EngineStartError(f"engine {spec.cell_id} (pool {self.pool!r} cell {spec.index}): {exc}") from None
        if view.workers[0].kind == "serve":
            handle = await self._engine_actor(spec, view, deadline)
            port = await _http_port(spec, handle, deadline)
            engine = ProviderEngineProcess(self, spec.cell_id, view, handle=handle, port=port)
        else:
            engine = ProviderEngineProcess(self, spec.cell_id, view)
        self._engines[spec.index] = engine
        if self._poller is None:
            self._poller = asyncio.create_task(self._poll(), name=f"{self.pool}-cells")
        await wait_ready(engine, deadline)
        return engine

    async def _engine_actor(self, spec: EngineSpec, view: CellView, deadline: float) -> ActorHandle:
        """Node 0's actor of an engine-actor cell, from the launch's name service (where the launcher put it)."""
        worker_id = view.workers[0].worker_id
        try:
            return await within(get_actor_async(worker_id), max(0.1, deadline - time.monotonic()))
        except Exception as exc:
            raise EngineStartError(
                f"engine {spec.cell_id} (pool {self.pool!r} cell {spec.index}): its actor {worker_id!r} is not in the "
                f"launch's name service: {exc}"
            ) from None

    async def stop_cell(self, index: int) -> None:
        """Stop the pool's cell ``index`` (its engine is retired)."""
        try:
            await self.api.stop_cells(pool=self.pool, indices=[index])
        except (RemoteError, ProviderApiError) as exc:
            logger.warning("stopping %s cell %d: %s", self.pool, index, exc)

    async def close(self) -> None:
        """Stop watching (the launcher stops the engines at teardown; the controller stops them on shutdown)."""
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                began = time.monotonic()
                self._update(await self.cells(), await self.api.deaths(since=self._deaths_seen), began)
            except (RemoteError, ProviderApiError) as exc:
                logger.warning("pool %s: cannot poll the launcher's cells: %s", self.pool, exc)

    def _update(self, views: list[CellView], deaths: list[DeathReport], began: float) -> None:
        """Mark engines whose cell died (a death report names one of their pids) or was replaced or stopped."""
        self._deaths_seen += len(deaths)
        for engine in self._engines.values():
            if engine.code is not None or engine.since >= began:
                continue
            for death in deaths:
                if death.pid in engine.pids:
                    engine.code = death.returncode if death.returncode is not None else DEAD_CODE
                    logger.warning("engine %s on %s: %s", engine.cell_id, death.host, death.reason)
            index = engine.view.index
            view = views[index] if index < len(views) else None
            if engine.code is None and (view is None or view.state != "alive" or view.pid != engine.pid):
                state = view.state if view else "gone"
                if state != "starting":
                    engine.code = DEAD_CODE
                    logger.warning("engine %s: its cell is %s on %s", engine.cell_id, state, engine.host)


async def _http_port(spec: EngineSpec, handle: ActorHandle, deadline: float) -> int:
    """The HTTP port an engine actor bound (its ``url()``)."""
    try:
        url = str(await within(handle.url(), max(0.1, deadline - time.monotonic())))
        return int(url.rsplit(":", 1)[1])
    except Exception as exc:
        raise EngineStartError(
            f"engine {spec.cell_id}: its actor {handle.actor_name} did not report its HTTP port ({exc}); the pool's "
            f"actor_class must be {ENGINE_ACTOR!r}"
        ) from None
