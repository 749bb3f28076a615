"""Actors for the fork-server spawn tests (tests/runtime/test_fork_spawn.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from runtime import spawn
from runtime.processes import driver_fork
from runtime.processes.fork_client import ForkedWorker

MODULES_AT_IMPORT = frozenset(sys.modules)


class Probe:
    """Reports what its process looks like from inside."""

    def __init__(self, *, fail: bool = False, wait_s: float = 0.0) -> None:
        if fail:
            raise ValueError("this probe was told to fail in its constructor")
        time.sleep(wait_s)  # a rank waiting in its constructor for peers (a rendezvous)
        self.modules_at_start = frozenset(MODULES_AT_IMPORT)

    def had_module(self, name: str) -> bool:
        """Whether ``name`` was imported before this module was (a fork server's preload)."""
        return name in self.modules_at_start

    def env(self, name: str) -> str | None:
        return os.environ.get(name)

    def parent(self) -> int:
        return os.getppid()

    def get_pid(self) -> int:
        return os.getpid()

    def orphan(self, count: int, sleep_s: float, own_session: bool = False) -> list[int]:
        """Leave ``count`` background ``sleep`` processes (``own_session``: each leading a session of its own)
        whose parent shell has exited: orphans, re-parented to the nearest subreaper; returns their pids."""
        sleep = f"exec setsid sleep {sleep_s}" if own_session else f"exec sleep {sleep_s}"
        script = f"sh -c '{sleep}' </dev/null >/dev/null 2>&1 & echo $!"
        return [int(subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout)
                for _ in range(count)]  # fmt: skip


class Nest:
    """Spawns Probes from inside an actor process (which has threads and a ZeroMQ context: its own fork server
    forks them)."""

    def __init__(self) -> None:
        self.children: list = []

    def spawn_probe(self, *, module: str = "") -> dict[str, object]:
        """Spawn a Probe; ``module``: also say whether that module was loaded before the Probe's class was."""
        child = spawn("fork_actors:Probe")
        self.children.append(child)
        found = {"pid": child.pid, "forked": isinstance(child.process.popen, ForkedWorker)}
        return {**found, "had_module": child.had_module(module).result(10)} if module else found

    def fork_server_pid(self) -> int | None:
        return driver_fork.server_pid()

    def kill_fork_server(self) -> int:
        pid = driver_fork.server_pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        return pid
