"""Trainer rank processes for tests: one script per scenario, every process killed by pid at the end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from actors.processes import free_port

REPO = Path(__file__).resolve().parents[2]


class Ranks:
    """Rank processes running ``helper``; :meth:`stop` kills whatever is still running, by pid.

    Each rank runs ``helper SCENARIO --rank R --world-size W --port P --tp T --timeout S --out DIR *extra``,
    logs to ``DIR/log{R}.txt`` and writes ``DIR/rank{R}.json``.
    """

    def __init__(
        self, helper: Path, scenario: str, *, world_size: int, tp: int, out: Path, timeout_s: float, extra: list[str]
    ) -> None:
        self.out = out
        self.procs: list[subprocess.Popen[bytes]] = []
        port = free_port()
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        for rank in range(world_size):
            args = [str(helper), scenario, "--rank", str(rank), "--world-size", str(world_size)]
            args += ["--port", str(port), "--tp", str(tp), "--timeout", str(timeout_s), "--out", str(out)]
            args += extra
            with open(out / f"log{rank}.txt", "wb") as log:  # the child keeps its own descriptor
                proc = subprocess.Popen([sys.executable, *args], cwd=REPO, env=env, stdout=log, stderr=log)
            self.procs.append(proc)

    def wait(self, ranks: list[int], deadline: float) -> None:
        for rank in ranks:
            remaining = max(0.1, deadline - time.monotonic())
            try:
                code = self.procs[rank].wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                pytest.fail(f"rank {rank} still running at the deadline\n{self.logs()}")
            assert code == 0, f"rank {rank} exited with {code}\n{self.logs()}"

    def result(self, rank: int) -> dict:
        data = json.loads((self.out / f"rank{rank}.json").read_text())
        assert "exception" not in data, data["exception"]
        return data

    def logs(self) -> str:
        return "\n".join(
            f"--- rank {r} ---\n{(self.out / f'log{r}.txt').read_text(errors='replace')[-3000:]}"
            for r in range(len(self.procs))
        )

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
        for proc in self.procs:
            proc.wait(timeout=10)
        assert all(proc.poll() is not None for proc in self.procs), "rank processes left running"
