"""Fixtures starting real CPU engine processes on free 127.0.0.1 ports; they are always stopped, by pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import requests

from actors.processes import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """The models these tests run in this process are tiny: one intra-op thread is faster than two that wait on
    each other, many times so on a loaded 2-core machine (tests/actors/test_cpu_engine_model.py: 22 s -> 0.6 s)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class EngineProcess:
    """A CPU engine subprocess (own process group) and its log file."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
        self.proc = proc
        self.port = port
        self.log_path = log_path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"engine {self.url} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(self.url + "/health_generate", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"engine {self.url} not ready within {timeout_s}s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL this engine (fault injection); it is reaped so the pid is not left a zombie."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL; only while the process is ours (not reaped)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


class EngineLauncher:
    """Starts engines and remembers them so that :meth:`stop_all` can stop every one."""

    free_port = staticmethod(free_port)

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[EngineProcess] = []

    def __call__(
        self, *extra_args: str, argv: Sequence[str] | None = None, port: int | None = None, wait: bool = True
    ) -> EngineProcess:
        """Start ``python -m actors.cpu_engine`` (or ``argv``, which must serve on ``port``)."""
        if argv is None:
            port = free_port()
            argv = [sys.executable, "-m", "actors.cpu_engine", "--host", "127.0.0.1", "--port", str(port)]
            argv += list(extra_args)
        assert port is not None, "give the port that argv serves on"
        log_path = self.log_dir / f"engine-{port}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                list(argv),
                cwd=REPO_ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            )
        engine = EngineProcess(proc, port, log_path)
        self.started.append(engine)
        if wait:
            engine.wait_ready()
        return engine

    def stop_all(self) -> None:
        for engine in self.started:
            engine.stop()
        leftover = [e.pid for e in self.started if e.proc.poll() is None]
        assert not leftover, f"engine processes still running: {leftover}"


@pytest.fixture
def spawn_engine(tmp_path: Path) -> Iterator[EngineLauncher]:
    """Start engines for one test."""
    launcher = EngineLauncher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.stop_all()


@pytest.fixture(scope="module")
def spawn_module_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineLauncher]:
    """Start engines shared by the tests of one module."""
    launcher = EngineLauncher(tmp_path_factory.mktemp("engines"))
    try:
        yield launcher
    finally:
        launcher.stop_all()
