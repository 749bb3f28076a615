"""The router as a launcher-placed worker: hosts.toml places it, the controller finds it by the provider API."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from actors.inference.provider_address import worker_url_host
from actors.inference.router_keeper import RouterKeeper
from actors.inference.router_settings import RouterSettings
from actors.inference.router_table import ROUTER_PORTS, router_command, router_pool
from actors.processes import Spawner
from actors.router import RouterError, RouterProcess
from launcher.launch import provider_service
from launcher.launch.provider_service import ProviderApiError
from launcher.launch.provider_views import CellView
from runtime import ActorHandle, RemoteError

logger = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["ROUTER_PORTS", "PoolRouter", "PoolRouterKeeper", "router_command", "router_keeper", "router_pool"]


class PoolRouter(RouterProcess):
    """A router the launcher started (one incarnation of the pool's cell): driven over HTTP, never forked here."""

    def __init__(self, view: CellView, api: ActorHandle) -> None:
        worker = view.workers[0]
        host, ports = worker_url_host(worker, api), worker.ports
        super().__init__(host=host, port=ports["port"], prometheus_port=ports["prometheus_port"])
        self.view = view
        self.dead: str | None = None
        self.since = time.monotonic()

    @property
    def pid(self) -> int | None:
        return self.view.pid

    def is_running(self) -> bool:
        return self.dead is None

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """The launcher stops it (at teardown, or restart_cell)."""
        return None

    def _check_alive(self) -> None:
        if self.dead is not None:
            raise RouterError(f"router {self.url} (cell {self.view.cell_id} on {self.view.host}): {self.dead}")

    def _log_tail(self, lines: int = 20) -> str:
        return f" (its log is on host {self.view.host}: `miles-launch logs hosts.toml {self.view.cell_id}`)"


# Adopts the pool's cell and watches it through the provider API; when it dies, asks the launcher to restart it
# on its host (new ports, so a new URL that router_url() names; the controller registers the serving engines again).
# A router on the launcher's machine is reached at the provider API's address. With router_pool = false, or without
# the launcher, the controller runs the router beside it (actors.inference.router_keeper).
class PoolRouterKeeper:
    """RouterKeeper's interface over a launcher pool's router cell (see PoolRouterKeeper)."""

    def __init__(self, *, api: ActorHandle, pool: str, settings: RouterSettings, poll_interval_s: float = 1.0) -> None:
        self.api = api
        self.pool = pool
        self.settings = settings
        self.poll_interval_s = poll_interval_s
        self.restarts = 0
        self.process: PoolRouter | None = None
        self._poller: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Adopt the pool's router (restarted first if it is not alive)."""
        views = await self._call("cells", self.api.cells(self.pool))
        if len(views) != 1:
            raise RouterError(f"router pool {self.pool!r} has {len(views)} cells; a router pool has one")
        view = views[0] if views[0].state == "alive" else await self._restart()
        self.process = PoolRouter(view, self.api)
        logger.info("router %s: cell %s on %s", self.process.url, view.cell_id, view.host)
        if self._poller is None:
            self._poller = asyncio.create_task(self._poll(), name=f"{self.pool}-router")

    async def wait_ready(self) -> None:
        assert self.process is not None
        await asyncio.to_thread(self.process.wait_ready, self.settings.start_timeout_s)

    async def restart(self) -> PoolRouter:
        """Ask the launcher to restart the router's cell on its host; returns the new router once it answers."""
        old = self.process
        self.restarts += 1
        if old is not None:
            logger.error("router %s (pid %s): %s; the launcher starts it again (restart %d)",
                         old.url, old.pid, old.dead, self.restarts)  # fmt: skip
        self.process = PoolRouter(await self._restart(), self.api)
        await self.wait_ready()
        return self.process

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller

    async def _restart(self) -> CellView:
        """Have the launcher restart the pool's cell (it waits until the cell is ready)."""
        restart = self.api.restart_cell(pool=self.pool, index=0, deadline_s=self.settings.start_timeout_s)
        return await self._call("restart_cell", restart)

    async def _call(self, what: str, call: Awaitable[T]) -> T:
        """``call``, a provider API call, with its refusals and failures as RouterErrors naming the pool."""
        try:
            return await call
        except (RemoteError, ProviderApiError) as exc:
            raise RouterError(f"router pool {self.pool!r}: {what}: {exc}") from None

    async def _poll(self) -> None:
        """Mark the router dead once its cell is not alive or is another incarnation."""
        while True:
            await asyncio.sleep(self.poll_interval_s)
            router, began = self.process, time.monotonic()
            try:
                (view,) = await self.api.cells(self.pool)
            except (RemoteError, ProviderApiError, ValueError) as exc:
                logger.warning("router pool %s: cannot poll the launcher: %s", self.pool, exc)
                continue
            if router is None or router.dead is not None or router.since >= began or view.state == "starting":
                continue
            if view.state != "alive" or view.pid != router.pid:
                router.dead = f"its cell is {view.state} ({view.death_reason or 'replaced'})"


def router_keeper(
    settings: RouterSettings, *, pool: str | None, provider_api: dict[str, Any] | None, spawner: Spawner,
    log_path: Path, poll_interval_s: float,
) -> RouterKeeper | PoolRouterKeeper:  # fmt: skip
    """The launcher pool ``pool``'s router (through the provider API), or without ``pool`` one run here."""
    if pool is None:
        return RouterKeeper(settings, log_path=log_path, spawner=spawner)
    if provider_api is None:
        raise ValueError(f"router_pool={pool!r} needs the launcher's provider API: plan_kwargs = ['provider_api']")
    return PoolRouterKeeper(api=provider_service.connect(provider_api), pool=pool, settings=settings,
                            poll_interval_s=poll_interval_s)  # fmt: skip
