"""How the inference controller starts and stops one engine process: the :class:`EngineLauncher` protocol.

The controller sees only the protocol, so engines may run here, on launcher-placed hosts, or as actors."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, Protocol

import aiohttp
from pydantic import BaseModel, ConfigDict, Field

from actors.inference.engine_pool import cpu_argv
from actors.inference.errors import EngineStartError
from actors.model_config import ModelConfig
from actors.processes import Spawner, exit_code, free_port, kill_group, log_tail, terminate_group
from actors.sglang_config import READINESS_PATH, SGLangConfig, is_hf_directory, launch_server_argv

logger = logging.getLogger(__name__)

EngineKind = Literal["cpu", "sglang"]
READY_POLL_S = 0.2
PORT_CLASH_MARKERS = ("address already in use", "errno 98")
START_ATTEMPTS = 3  # only a port taken between choosing and binding it is retried


class EngineSpec(BaseModel):
    """What to start for one engine cell; immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cell_id: str = Field(min_length=1, description="'{server_id}-{index}'")
    index: int = Field(ge=0, description="index of the cell in its server (selects GPUs)")
    incarnation: int = Field(default=0, ge=0, description="0 for the first start, +1 per restart")
    kind: EngineKind = "cpu"
    sglang: SGLangConfig = Field(description="template; host, port, GPU ids and NCCL port are chosen per engine")
    model: ModelConfig | None = Field(
        default=None, description="CPU engine: the built-in model's architecture and seed (unused for an HF model_path)"
    )
    weight_version: str | None = Field(default=None, description="CPU engine: the version it reports at start")
    cpu_args: tuple[str, ...] = Field(default=(), description="CPU engine: further flags")


class EngineProcess(Protocol):
    """One running engine as the controller sees it: ``exit_code()`` never blocks (None while running); ``stop()``
    is graceful then forced, ``kill()`` at once, both idempotent; ``pid`` is the engine's pid on its own host."""

    @property
    def cell_id(self) -> str: ...

    @property
    def url(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def log_path(self) -> str | None: ...

    def exit_code(self) -> int | None: ...

    async def stop(self, timeout_s: float = 10.0) -> int | None: ...

    async def kill(self) -> int | None: ...

    def log_tail(self, lines: int = 20) -> str: ...


class EngineLauncher(Protocol):
    """Starts engine processes: ``launch`` fills in the template's host, ports and GPUs, waits until
    ``READINESS_PATH`` answers 200, and raises EngineStartError (cell, URL, log tail) when the engine exits first or
    the deadline passes, leaving nothing running; ``close`` stops whatever it still runs."""

    async def launch(self, spec: EngineSpec, *, timeout_s: float) -> EngineProcess: ...

    async def close(self) -> None: ...


def engine_argv(spec: EngineSpec, *, host: str, port: int, nccl_port: int, python: str = sys.executable) -> list[str]:
    """The command line that starts ``spec``'s engine serving on ``host:port``."""
    if spec.kind == "cpu":
        hf = is_hf_directory(spec.sglang.model_path)  # a Hugging Face directory brings its own architecture
        return cpu_argv(spec.sglang, model=None if hf else spec.model, weight_version=spec.weight_version,
                        cpu_args=spec.cpu_args, host=host, port=port, python=python)  # fmt: skip
    template = spec.sglang
    config = template.model_copy(
        update={
            "host": host,
            "port": port,
            "nccl_port": nccl_port,
            "base_gpu_id": template.base_gpu_id + spec.index * template.tp_size,
        }
    )
    return launch_server_argv(SGLangConfig.model_validate(config.model_dump()), python=python)


# LocalEngineLauncher: engines on this host, each in its own process group, SIGKILLed if the controller's process
# dies (PR_SET_PDEATHSIG, actors.processes), logging to {log_dir}/{cell_id}.{incarnation}.log, on free loopback
# ports.
class LocalEngineProcess:
    """An engine subprocess of this process (see :class:`LocalEngineLauncher`)."""

    def __init__(self, cell_id: str, url: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.cell_id = cell_id
        self.url = url
        self.proc = proc
        self._log_path = log_path

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    @property
    def log_path(self) -> str | None:
        return str(self._log_path)

    def exit_code(self) -> int | None:
        return exit_code(self.proc)

    async def stop(self, timeout_s: float = 10.0) -> int | None:
        if self.proc.returncode is not None:
            return self.proc.returncode
        code = await asyncio.to_thread(terminate_group, self.proc, timeout_s)
        logger.info("engine %s at %s (pid %d) stopped, exit code %s", self.cell_id, self.url, self.proc.pid, code)
        return code

    async def kill(self) -> int | None:
        return await asyncio.to_thread(kill_group, self.proc)

    def log_tail(self, lines: int = 20) -> str:
        return log_tail(self._log_path, lines)


class LocalEngineLauncher:
    """Starts engines as subprocesses of this process, on this host."""

    def __init__(
        self,
        *,
        log_dir: str | Path,
        host: str = "127.0.0.1",
        python: str = sys.executable,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        spawner: Spawner | None = None,
    ) -> None:
        """``env``: the engines' whole environment (default: ours). ``spawner``: share one with a router."""
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.python = python
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self._own_spawner = spawner is None
        self.spawner = spawner or Spawner(name="engine-spawner")
        self._running: set[LocalEngineProcess] = set()

    def argv(self, spec: EngineSpec, port: int, nccl_port: int) -> list[str]:
        """The command line for ``spec`` serving on ``port``."""
        return engine_argv(spec, host=self.host, port=port, nccl_port=nccl_port, python=self.python)

    async def launch(self, spec: EngineSpec, *, timeout_s: float) -> LocalEngineProcess:
        """Start ``spec``'s engine and wait until it is ready (the contract: :class:`EngineLauncher`)."""
        deadline = time.monotonic() + timeout_s
        for attempt in range(1, START_ATTEMPTS + 1):
            port, nccl_port = free_port(self.host), free_port(self.host)
            url = f"http://{self.host}:{port}"
            log_path = self.log_dir / f"{spec.cell_id}.{spec.incarnation}.log"
            proc = await self.spawner.popen(
                self.argv(spec, port, nccl_port), log_path=log_path, env=self.env, cwd=self.cwd
            )
            engine = LocalEngineProcess(spec.cell_id, url, proc, log_path)
            self._running = {e for e in self._running if e.proc.returncode is None} | {engine}
            logger.info("engine %s starting at %s (pid %d, log %s)", spec.cell_id, url, proc.pid, log_path)
            try:
                await wait_ready(engine, deadline)
                return engine
            except EngineStartError as exc:
                await engine.kill()
                self._running.discard(engine)
                clash = any(marker in engine.log_tail(40).lower() for marker in PORT_CLASH_MARKERS)
                if not clash or attempt == START_ATTEMPTS or time.monotonic() >= deadline:
                    raise
                logger.warning("engine %s: port %d was taken, trying another (%s)", spec.cell_id, port, exc)
            except BaseException:
                await engine.kill()
                self._running.discard(engine)
                raise
        raise AssertionError("unreachable")

    async def close(self) -> None:
        """Stop every engine still running, then the spawner thread."""
        running, self._running = [e for e in self._running if e.proc.returncode is None], set()
        await asyncio.gather(*(engine.stop(timeout_s=5.0) for engine in running), return_exceptions=True)
        if self._own_spawner:
            self.spawner.close()


async def wait_ready(engine: EngineProcess, deadline: float) -> None:
    """Poll ``READINESS_PATH`` until 200; raise EngineStartError if the engine exits or ``deadline`` passes."""
    started = time.monotonic()
    last = "no answer yet"
    async with aiohttp.ClientSession() as session:
        while True:
            code = engine.exit_code()
            if code is not None:
                raise EngineStartError(
                    f"engine {engine.cell_id} at {engine.url} (pid {engine.pid}) exited with code {code} before "
                    f"it was ready; log {engine.log_path}:\n{engine.log_tail()}"
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise EngineStartError(
                    f"engine {engine.cell_id} at {engine.url} (pid {engine.pid}) was not ready within "
                    f"{time.monotonic() - started:.1f}s (last: {last}); log {engine.log_path}:\n{engine.log_tail()}"
                )
            try:
                timeout = aiohttp.ClientTimeout(total=max(0.1, min(5.0, left)))
                async with session.get(engine.url + READINESS_PATH, timeout=timeout) as reply:
                    if reply.status == 200:
                        logger.info(
                            "engine %s at %s ready in %.1fs", engine.cell_id, engine.url, time.monotonic() - started
                        )
                        return
                    last = f"HTTP {reply.status}"
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(min(READY_POLL_S, max(0.0, deadline - time.monotonic())))
