"""Shared fixtures: every test that starts processes must leave none behind."""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from prometheus_server import Prometheus, prometheus_binary, start_prometheus

from runtime.processes import driver_fork

pytest_plugins = ["process_guard"]  # the `processes` marker, checked in runs without marked tests

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The suite runs many torch processes on a machine of few cores (CI has two): each takes one thread unless a test
# says otherwise (two threads each slowed a tiny model by up to 30x under load). Actors inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The suite is one long-lived driver that connects to well over a thousand actors: let it open as many files as
# the machine allows (the shared ZeroMQ context sizes itself by this limit, transport.sockets.shared_context).
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if _hard == resource.RLIM_INFINITY or _soft < _hard:
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (_hard if _hard != resource.RLIM_INFINITY else 65536, _hard))
    except (ValueError, OSError) as exc:  # the limit stays as it was; say why once
        print(f"[tests] could not raise RLIMIT_NOFILE from {_soft}: {exc}", file=sys.stderr)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n 2 --dist loadgroup``: scripts/test.sh) a module's tests run on one worker, so its
    module fixtures (a network-namespace cluster, a launch) start once; the real Slurm cluster's tests share one."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            slurm = "slurm_cluster" in getattr(item, "fixturenames", ())
            item.add_marker(pytest.mark.xdist_group("slurm" if slurm else item.nodeid.partition("::")[0]))


def _running(proc: psutil.Process) -> bool:
    """Alive and not a zombie (one that ends or becomes a zombie while we look counts as gone)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # ZombieProcess is a NoSuchProcess
        return False


def _children() -> list[psutil.Process]:
    """Our running descendants but this process's own fork server (runtime.processes.driver_fork), which lives as long
    as we do."""
    own = driver_fork.server_pid()
    try:
        return [p for p in psutil.Process(os.getpid()).children(recursive=True) if p.pid != own and _running(p)]
    except psutil.NoSuchProcess:
        return []


def _describe(proc: psutil.Process) -> tuple[int, list[str]]:
    try:
        return proc.pid, proc.cmdline()[:4]
    except psutil.NoSuchProcess:
        return proc.pid, ["<ended>"]


@pytest.fixture
def no_leaks() -> Iterator[None]:
    """Fail the test if it leaves child processes running (they are killed either way)."""
    before = {p.pid for p in _children()}
    yield
    deadline = time.monotonic() + 5.0
    leaked: list[psutil.Process] = []
    while time.monotonic() < deadline:
        leaked = [p for p in _children() if p.pid not in before]
        if not leaked:
            return
        time.sleep(0.1)
    described = [_describe(p) for p in leaked]
    for proc in leaked:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    pytest.fail(f"test left processes running: {described}")


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[..., Prometheus]]:
    """Factory ``prometheus(sd_url, file_sd=None)``: a real Prometheus on loopback, stopped by pid afterwards."""
    if prometheus_binary() is None:
        pytest.fail("prometheus is not installed (Debian package `prometheus`; scripts/setup.sh installs it)")
    started: list[Prometheus] = []

    def start(sd_url: str, file_sd: Path | None = None) -> Prometheus:
        workdir = tmp_path / f"prometheus-{len(started)}"
        workdir.mkdir()
        server = start_prometheus(workdir, sd_url, file_sd)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()
