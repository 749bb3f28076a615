"""The inference controller actor: one sglang-router in front of engine cells it starts, watches and restarts.

It composes a cell keeper, a weight updater and a memory releaser, each given the frozen settings it needs."""

from __future__ import annotations

import asyncio
import importlib
import logging
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

from actors.inference.cell_keeper import CellKeeper
from actors.inference.cells import LIVE_STATES, CellState, EngineCell
from actors.inference.controller_settings import ControllerSettings
from actors.inference.engine_launcher import EngineKind, EngineLauncher, LocalEngineLauncher
from actors.inference.errors import NoServingEngines
from actors.inference.memory import MemoryReleaser
from actors.inference.provider_engines import ProviderEngineLauncher
from actors.inference.router_keeper import RouterKeeper
from actors.inference.router_pool import PoolRouterKeeper, router_keeper
from actors.inference.router_settings import RouterSettings
from actors.inference.update_lock import UpdateLock
from actors.inference.weight_updates import PAUSE_MODES, WeightUpdater
from actors.inference.weights_cache import WeightsCache
from actors.model_config import ModelConfig
from actors.processes import Spawner, advertised_host
from actors.sglang_config import SGLangConfig
from launcher.launch.provider_service import ProviderClient
from runtime import method

logger = logging.getLogger(__name__)


class InferenceController:
    """Owns ``num_engines`` engine cells ``{server_id}-{index}`` behind one sglang-router."""

    def __init__(
        self,
        *,
        server_id: str,
        num_engines: int | None = None,
        engine: EngineKind = "cpu",
        sglang: SGLangConfig | None = None,
        model: ModelConfig | None = None,
        initial_weights: bool = False,
        initial_weight_version: str = "default",
        router: RouterSettings | None = None,
        health_check_interval_s: float = 2.0,
        health_failure_threshold: int = 2,
        max_restarts: int = 3,
        engine_start_timeout_s: float = 120.0,
        request_timeout_s: float = 30.0,
        update_timeout_s: float = 300.0,
        update_lock_timeout_s: float = 600.0,
        pause_mode: str = "abort",
        cpu_engine_args: list[str] | None = None,
        log_dir: str | None = None,
        launcher: str | None = None,
        engine_pool: str | None = None,
        router_pool: str | bool | None = None,
        provider_api: dict[str, Any] | None = None,
    ) -> None:
        """``sglang``: the engines' SGLangConfig template (required for ``engine="sglang"``; host, port, GPU ids
        and NCCL port are chosen per engine). ``model``: the CPU engine's ModelConfig. ``initial_weights``: a
        fresh engine's own weights (CPU: from ``model.seed``; SGLang: ``model_path``) count as version
        ``initial_weight_version``, so engines serve at once; otherwise they wait for the first update.
        ``health_*``: how often the controller checks each engine and after how many failed checks it restarts
        it (a dead process is restarted at the first check); ``max_restarts`` per cell, then it is disposed.
        ``update_lock_timeout_s``: an update holding the lock longer is aborted (its caller is presumed dead).
        ``pause_mode``: SGLang's pause mode during updates. ``launcher``: ``"module:factory"`` returning an
        EngineLauncher, called with ``log_dir=`` (default: LocalEngineLauncher). ``engine_pool``: the hosts.toml pool
        of launcher-placed engines (actors.inference.engine_pool) to serve instead of forking engines here, one
        controller cell per pool cell (``num_engines``, if given, must match); the launcher fills ``provider_api``
        (``plan_kwargs = ["provider_api"]``). ``router_pool``: the hosts.toml pool of the router
        (actors.inference.router_pool); miles-launch sets it by default to a router pool on the launcher's host
        (actors.inference.router_table); ``None``/``False``: the controller runs the router beside it."""
        if engine_pool is None and num_engines is None:
            raise ValueError("give num_engines (engines this controller starts) or engine_pool (a launcher pool)")
        if num_engines is not None and num_engines < 1:
            raise ValueError(f"num_engines must be at least 1, got {num_engines}")
        if router_pool is True or router_pool == "":  # miles-launch turns true into a pool id (router_table.py)
            raise ValueError(f"router_pool={router_pool!r}: give a router pool's id, or false to run the router here")
        pools = [f"{k}={v!r}" for k, v in (("engine_pool", engine_pool), ("router_pool", router_pool)) if v]
        if pools and provider_api is None:
            raise ValueError(
                f"{' and '.join(pools)} needs the launcher's provider API: add plan_kwargs = ['provider_api'] "
                "to the controller's pool in hosts.toml"
            )
        if router_pool is None and provider_api is not None:  # under miles-launch, whose expander sets router_pool
            logger.warning(
                "inference controller %s: router_pool is not set, so its router runs beside it; miles-launch "
                "places it on the launcher's host through the pool expander of actors.inference (entry point "
                "group miles.pool_expanders), which did not run: install this package (pip install -e .), or set "
                "router_pool = false to keep the router here",
                server_id,
            )
        if engine not in ("cpu", "sglang"):
            raise ValueError(f"engine must be 'cpu' or 'sglang', got {engine!r}")
        if engine == "sglang" and sglang is None:
            raise ValueError("engine='sglang' needs sglang=SGLangConfig(model_path=..., port=...) as a template")
        if pause_mode not in PAUSE_MODES:
            raise ValueError(f"pause_mode must be one of {PAUSE_MODES}, got {pause_mode!r}")
        for name, value in [
            ("health_check_interval_s", health_check_interval_s),
            ("request_timeout_s", request_timeout_s),
        ]:
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        self.settings = ControllerSettings(
            server_id=server_id,
            engine=engine,
            sglang=sglang or SGLangConfig(model_path="cpu-engine", port=30000),
            model=model or ModelConfig(),
            router=router or RouterSettings(),
            health_check_interval_s=health_check_interval_s,
            health_failure_threshold=health_failure_threshold,
            max_restarts=max_restarts,
            engine_start_timeout_s=engine_start_timeout_s,
            request_timeout_s=request_timeout_s,
            update_timeout_s=update_timeout_s,
            update_lock_timeout_s=update_lock_timeout_s,
            pause_mode=pause_mode,
            cpu_engine_args=tuple(cpu_engine_args or ()),
            initial_weight_version=initial_weight_version,
        )
        self.server_id = server_id
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix=f"inference-{server_id}-"))
        self.launcher_factory = launcher
        self.engine_pool = engine_pool
        self.router_pool = router_pool or None  # False: the router runs beside the controller
        self.provider_api = provider_api
        self.num_engines = num_engines
        self._cells = [EngineCell(f"{server_id}-{index}", index) for index in range(num_engines or 0)]
        self._weights = WeightsCache(version=initial_weight_version, restorable=initial_weights)
        lock, released = UpdateLock(), set[str]()
        self._keeper = CellKeeper(self.settings, self._cells, self._weights, lock, released)
        self._memory = MemoryReleaser(self.settings, self._cells, lock, self._keeper.on_all, released)
        self._updates = WeightUpdater(self._keeper, self._weights, lock, self._memory.check_weights_held)
        self._start_task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._spawner: Spawner | None = None
        self._launcher: EngineLauncher | None = None
        self._routers: RouterKeeper | PoolRouterKeeper | None = None

    # ---- lifecycle --------------------------------------------------------------------------------------

    async def start(self) -> list[dict[str, Any]]:
        """Start the router and every engine; returns cells() once each is serving, pending weights or disposed."""
        if self._start_task is None:
            self._start_task = asyncio.ensure_future(self._start())
        try:
            await asyncio.shield(self._start_task)
        except Exception:
            await self.shutdown()  # leave nothing running behind a failed start
            raise
        if not any(cell.state in LIVE_STATES for cell in self._cells):
            errors = "; ".join(f"{c.cell_id}: {c.last_error}" for c in self._cells)
            raise NoServingEngines(f"server {self.server_id}: no engine could be started ({errors})")
        return self.cells()

    async def _start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._session = aiohttp.ClientSession()
        self._spawner = Spawner(name=f"{self.server_id}-spawner")
        self._launcher = self._make_launcher(self._spawner)
        if isinstance(self._launcher, ProviderEngineLauncher):
            await self._adopt_pool(self._launcher)
        self._routers = router_keeper(
            self.settings.router, pool=self.router_pool, provider_api=self.provider_api, spawner=self._spawner,
            log_path=self.log_dir / "router.log", poll_interval_s=min(1.0, self.settings.health_check_interval_s),
        )  # fmt: skip
        await self._keeper.start(self._launcher, self._session, self._routers)
        assert self._keeper.router is not None
        logger.info("server %s: router %s, cells %s", self.server_id, self._keeper.router.url, self.cells())

    async def _adopt_pool(self, launcher: ProviderEngineLauncher) -> None:
        """One cell per cell of the launcher's engine pool."""
        count = len(await launcher.cells())
        if self.num_engines is not None and self.num_engines != count:
            raise ValueError(f"num_engines={self.num_engines} but pool {self.engine_pool!r} has {count} cells")
        self._cells[:] = [EngineCell(f"{self.server_id}-{index}", index) for index in range(count)]  # shared list

    def _make_launcher(self, spawner: Spawner) -> EngineLauncher:
        if self.engine_pool is not None:
            assert self.provider_api is not None
            interval = min(1.0, self.settings.health_check_interval_s)
            return ProviderEngineLauncher(api=ProviderClient(self.provider_api), pool=self.engine_pool,
                                          poll_interval_s=interval)  # fmt: skip
        if self.launcher_factory is None:
            return LocalEngineLauncher(log_dir=self.log_dir, spawner=spawner, host=advertised_host())
        module, _, name = self.launcher_factory.partition(":")
        factory = getattr(importlib.import_module(module), name)
        return factory(log_dir=self.log_dir)

    async def shutdown(self, timeout_s: float = 20.0) -> list[dict[str, Any]]:
        """Stop every engine and the router; returns the final cells(). Safe to call twice."""
        tasks = [
            t for t in [self._start_task, *self._keeper.stop()] if t is not None and t is not asyncio.current_task()
        ]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._updates.drop_session()
        processes = [cell.process for cell in self._cells if cell.process is not None]
        await asyncio.gather(*(p.stop(timeout_s=timeout_s / 2) for p in processes), return_exceptions=True)
        for cell in self._cells:
            cell.move(CellState.DISPOSED)
            cell.router_worker_id = None
        router = self._keeper.router
        if router is not None:
            await asyncio.to_thread(router.stop, timeout_s / 2)
        if self._routers is not None:
            await self._routers.close()
        if self._launcher is not None:
            await self._launcher.close()
        if self._spawner is not None:
            self._spawner.close()
        if self._session is not None:
            await self._session.close()
        logger.info("server %s shut down", self.server_id)
        return self.cells()

    # ---- weight updates (actors.inference.weight_updates) --------------------------------------------------

    # SGLang's sequence under one lock, held from start_update_weights to end/abort_update_weights: pause
    # generation, flush the cache, update (the trainer posts to the returned engine URLs, or the controller does it in
    # update_weights_from_tensors / _from_disk), set the version, continue.
    async def start_update_weights(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Take the update lock (waiting up to ``timeout_s``), pause and flush every engine; returns ``{"token",
        "engine_urls", "weight_version", "flush_cache", "engine_handles"}``. End with end_update_weights(token,
        version) or abort_update_weights(token)."""
        return await self._updates.start_update_weights(timeout_s)

    async def end_update_weights(
        self, token: str, weight_version: str, weights_dir: str | None = None
    ) -> dict[str, Any]:
        """Set ``weight_version`` on the updated engines, continue generation and release the lock
        (``weights_dir``: where restarted engines restore the pushed weights from)."""
        return await self._updates.end_update_weights(token, weight_version, weights_dir)

    async def abort_update_weights(self, token: str) -> dict[str, Any]:
        """Continue generation and release the lock; the version stays. Engines keep what they were sent."""
        return await self._updates.abort_update_weights(token)

    async def update_weights_from_tensors(
        self, named_tensors: dict[str, Any], weight_version: str, token: str | None = None, timeout_s: float = 60.0
    ) -> dict[str, Any]:
        """Send CPU tensors (HF names) to every engine (CPU engine only); the whole sequence unless ``token``
        names an update already started (then this is one bucket of it)."""
        return await self._updates.update_weights_from_tensors(named_tensors, weight_version, token, timeout_s)

    async def update_weights_from_disk(
        self, model_path: str, weight_version: str, token: str | None = None, timeout_s: float = 60.0
    ) -> dict[str, Any]:
        """Every engine loads ``model_path``; restarted engines are restored from it too."""
        return await self._updates.update_weights_from_disk(model_path, weight_version, token, timeout_s)

    @property
    def flushes_cache(self) -> bool:
        """Whether an update flushes the engines' cache (not with pause_mode "in_place")."""
        return self._updates.flushes_cache

    # ---- memory for colocated training (actors.inference.memory) -------------------------------------------

    async def release_memory(self, tags: list[str] | None = None, timeout_s: float = 60.0) -> dict[str, Any]:
        """Release ``tags`` (default: all) on every engine, once no update runs (waits up to ``timeout_s``);
        returns memory_state(). Engines must be idle (end the rollout first)."""
        return await self._memory.release_memory(tags, timeout_s)

    async def resume_memory(self, tags: list[str] | None = None, timeout_s: float = 60.0) -> dict[str, Any]:
        """Take ``tags`` (default: all released) back on every engine; returns memory_state()."""
        return await self._memory.resume_memory(tags, timeout_s)

    def memory_state(self) -> dict[str, Any]:
        """``{"released": [tags], "generation": whether generation is allowed}``."""
        return self._memory.memory_state()

    # ---- status (control plane: answers at once) --------------------------------------------------------

    @method(control_plane=True)
    def cells(self) -> list[dict[str, Any]]:
        """Each cell's id, url, state, weight_version, restarts, pid, log_path, router_worker_id, last_error."""
        return [cell.view() for cell in self._cells]

    @method(control_plane=True)
    def engine_urls(self) -> list[str]:
        """URLs of the engines that take weight updates (serving and pending weights)."""
        return [cell.url for cell in self._cells if cell.state in LIVE_STATES and cell.url]

    @method(control_plane=True)
    def router_url(self) -> str:
        """Where to send generation; refused (MemoryReleased) while the engines' memory is released."""
        self._memory.check_generation()
        router = self._keeper.router
        if router is None:
            raise NoServingEngines(f"server {self.server_id} is not started: call start() first")
        return router.url

    @method(control_plane=True)
    def weight_version(self) -> str:
        """The version serving engines hold (the latest completed update)."""
        return self._weights.version

    @method(control_plane=True)
    def status(self) -> dict[str, Any]:
        """Router, weights and update-lock state, and the cells."""
        router = self._keeper.router
        return {
            "server_id": self.server_id,
            "router_url": router.url if router else None,
            "router_metrics_url": router.metrics_url if router else None,
            "router_pid": router.pid if router else None,
            "router_alive": bool(router and router.is_running()),
            "router_restarts": self._routers.restarts if self._routers else 0,
            "weight_version": self._weights.version,
            "pause_mode": self.settings.pause_mode,
            "weights_restorable": self._weights.restorable,
            "update": self._updates.view(),
            "memory": self.memory_state(),
            "cells": self.cells(),
        }

    async def wait_until_serving(self, count: int | None = None, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Wait until ``count`` cells (default: every cell not disposed) serve; returns cells()."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            wanted = count if count is not None else sum(c.state != CellState.DISPOSED for c in self._cells)
            if sum(c.state == CellState.SERVING for c in self._cells) >= wanted:
                return self.cells()
            if asyncio.get_running_loop().time() >= deadline:
                raise NoServingEngines(
                    f"server {self.server_id}: {wanted} serving engines not reached within {timeout_s}s: {self.cells()}"
                )
            await asyncio.sleep(0.05)
