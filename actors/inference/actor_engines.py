"""CPU engines started as actors, so that they can take weights over collective refs.

The same engine and HTTP API as a ``python -m actors.cpu_engine`` process; only the weight path is added."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from actors.inference.cells import EngineCell
from actors.inference.engine_launcher import EngineSpec, engine_argv, wait_ready
from actors.inference.engine_pool import ENGINE_ACTOR
from actors.inference.errors import EngineStartError
from actors.processes import advertised_host
from runtime import ActorHandle, spawn_async, within

logger = logging.getLogger(__name__)


class ActorEngineProcess:
    """One engine actor as the controller sees it (an :class:`~actors.inference.engine_launcher.EngineProcess`)."""

    def __init__(self, cell_id: str, url: str, handle: ActorHandle) -> None:
        self.cell_id = cell_id
        self.url = url
        self.handle = handle

    @property
    def pid(self) -> int | None:
        return self.handle.pid

    @property
    def log_path(self) -> str | None:
        return None  # its lines are in the controller's output

    def exit_code(self) -> int | None:
        process = self.handle.process
        return None if process is None or process.alive() else process.exit_code

    async def stop(self, timeout_s: float = 10.0) -> int | None:
        return await self.kill()  # nothing to save: the controller holds the weights' version, not the engine

    async def kill(self) -> int | None:
        await asyncio.to_thread(self.handle.kill)
        logger.info("engine actor %s at %s (pid %s) stopped", self.cell_id, self.url, self.pid)
        return self.exit_code()

    def log_tail(self, lines: int = 20) -> str:
        process = self.handle.process
        return "\n".join(list(process.recent_output)[-lines:]) if process is not None else ""


# Chosen with the controller's launcher = "actors.inference.actor_engines:actor_engine_launcher": each engine
# runs (engine_argv's flags) in a CPUEngineActor on this host, so health checks, the router and every update path
# work as before, and start_update_weights also returns the paused engines' handles (engine_handles). A restart is a
# new actor (a new handle), so a collective group with the old one must be formed again.
class ActorEngineLauncher:
    """Starts CPU engines as actors on this host (an :class:`~actors.inference.engine_launcher.EngineLauncher`)."""

    def __init__(self, *, host: str = "127.0.0.1") -> None:
        self.host = host
        self._running: set[ActorEngineProcess] = set()

    async def launch(self, spec: EngineSpec, *, timeout_s: float) -> ActorEngineProcess:
        """Spawn ``spec``'s engine as a CPUEngineActor and wait until its ``/health_generate`` answers."""
        if spec.kind != "cpu":
            raise EngineStartError(
                f"engine {spec.cell_id}: the actor engine launcher runs CPU engines only (engine = 'cpu'); real "
                "SGLang is its own process: drop launcher = 'actors.inference.actor_engines:actor_engine_launcher'"
            )
        deadline = time.monotonic() + timeout_s
        argv = engine_argv(spec, host=self.host, port=0, nccl_port=0)[3:]  # without "python -m actors.cpu_engine"
        try:
            handle = await spawn_async(ENGINE_ACTOR, kwargs={"argv": argv}, deadline_s=timeout_s)
        except Exception as exc:
            raise EngineStartError(f"engine {spec.cell_id}: its actor did not start: {exc}") from exc
        engine = ActorEngineProcess(spec.cell_id, "", handle)
        try:
            engine.url = await _url(handle, deadline)
            logger.info("engine %s starting as actor %s at %s (pid %s)", spec.cell_id, handle.actor_name, engine.url,
                        handle.pid)  # fmt: skip
            await wait_ready(engine, deadline)
        except BaseException:
            await engine.kill()
            raise
        self._running = {e for e in self._running if e.exit_code() is None} | {engine}
        return engine

    async def close(self) -> None:
        """Stop every engine actor still running."""
        running, self._running = list(self._running), set()
        await asyncio.gather(*(engine.kill() for engine in running), return_exceptions=True)


async def _url(handle: ActorHandle, deadline: float) -> str:
    try:
        return str(await within(handle.url(), max(0.1, deadline - time.monotonic())))
    except Exception as exc:
        raise EngineStartError(
            f"engine actor {handle.actor_name} (pid {handle.pid}) did not report its URL: {exc}"
        ) from exc


def actor_engine_launcher(log_dir: str | Path) -> ActorEngineLauncher:
    """The controller's ``launcher`` factory (``"actors.inference.actor_engines:actor_engine_launcher"``)."""
    del log_dir  # engine actors' output goes to the controller's
    return ActorEngineLauncher(host=advertised_host())


def engine_handles(cells: Sequence[EngineCell]) -> list[ActorHandle] | None:
    """The actor handles of ``cells``' engines, in order; None when any engine is a plain process."""
    handles = [getattr(cell.process, "handle", None) for cell in cells]
    return handles if handles and all(isinstance(h, ActorHandle) for h in handles) else None
