"""The inference controller's sglang-router: started beside the controller, started again if it dies.

Used without the launcher's provider API, or with ``router_pool = false``; otherwise the router is a launcher pool
(:mod:`actors.inference.router_table`, :mod:`actors.inference.router_pool`).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from actors.inference.router_settings import RouterSettings
from actors.processes import Spawner, free_port
from actors.router import RouterProcess

logger = logging.getLogger(__name__)


class RouterKeeper:
    """One sglang-router process at a time, on fixed ports; :meth:`restart` replaces a dead one.

    It runs on the controller's host (hosts.toml places the controller's pool, ``hosts = [...]``), listening on
    ``RouterSettings.host`` (default: the host's advertised address)."""

    def __init__(self, settings: RouterSettings, *, log_path: Path, spawner: Spawner) -> None:
        self.settings = settings
        self.log_path = log_path
        self.spawner = spawner
        # Chosen once, so a router started again after a crash keeps its URL: clients retry against the same address,
        # and the controller registers every serving engine with the new router.
        self.port = settings.port or free_port(settings.host)
        self.prometheus_port = settings.prometheus_port or free_port(settings.host)
        self.restarts = 0
        self.process = self._new()

    def _new(self) -> RouterProcess:
        settings = self.settings
        return RouterProcess(
            host=settings.host,
            port=self.port,
            prometheus_port=self.prometheus_port,
            policy=settings.policy,
            health_check_interval_s=settings.health_check_interval_s,
            health_failure_threshold=settings.health_failure_threshold,
            worker_startup_timeout_s=settings.worker_startup_timeout_s,
            log_level=settings.log_level,
            extra_args=settings.extra_args,
            log_path=self.log_path,
            preexec_fn=self.spawner.preexec,
        )

    async def start(self) -> None:
        """Start the process (returns at once; :meth:`wait_ready` waits for it)."""
        await self.spawner.run(self.process.start, self.settings.start_timeout_s, wait=False)

    async def wait_ready(self) -> None:
        await asyncio.to_thread(self.process.wait_ready, self.settings.start_timeout_s)

    async def restart(self) -> RouterProcess:
        """Reap the old process and start a new one on the same ports; returns it once it answers."""
        old = self.process
        code = await asyncio.to_thread(old.stop, 1.0)
        self.restarts += 1
        logger.error("router %s (pid %s) exited with code %s; starting it again (restart %d)",
                     old.url, old.pid, code, self.restarts)  # fmt: skip
        self.process = self._new()
        await self.start()
        await self.wait_ready()
        return self.process

    async def close(self) -> None:
        """Nothing to let go of (the controller stops the process)."""
