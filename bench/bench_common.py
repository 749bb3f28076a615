"""Measuring helpers shared by the benchmarks."""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def percentile(samples: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q))


def pipelined(method: Callable[[int], Any], calls: int, window: int, timeout_s: float = 60.0) -> float:
    """Calls/s of ``calls`` calls with at most ``window`` in flight (each a PendingCall-like ``.result()``)."""
    pending: collections.deque[Any] = collections.deque()
    started = time.perf_counter()
    for i in range(calls):
        if len(pending) >= window:
            pending.popleft().result(timeout=timeout_s)
        pending.append(method(i))
    while pending:
        pending.popleft().result(timeout=timeout_s)
    return calls / (time.perf_counter() - started)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_ranks(commands: Sequence[list[str]], outputs: Sequence[Path], *, cwd: Path, deadline_s: float) -> list[Any]:
    """Run one process per rank (``commands[i]`` writes JSON to ``outputs[i]``), all within ``deadline_s``; the
    JSON of every rank. Ranks still running at the deadline, or after one failed, are killed."""
    env = {**os.environ, "PYTHONPATH": f"{cwd}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for command in commands:
            procs.append(subprocess.Popen(command, cwd=cwd, env=env, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + deadline_s
        for rank, proc in enumerate(procs):
            code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            if code != 0:
                raise RuntimeError(f"rank {rank} of {len(procs)} exited with {code}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    return [json.loads(out.read_text()) for out in outputs]


def launch_demo(source: Path, name: str, iterations: int, work: Path, **args: str) -> tuple[str, dict[str, Any]]:
    """``miles-launch`` a copy of the demo config ``source`` with ``iterations`` (and each ``[job.args]`` line
    ``key = value`` of ``args`` replaced), its workdirs under ``work/name``; returns its stdout and RESULT figures."""
    text = re.sub(r"(?m)^iterations = \d+", f"iterations = {iterations}", source.read_text())
    for key, value in args.items():
        text = re.sub(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
    dirs = iter(range(100))
    text = re.sub(r'(?m)^workdir = "[^"]+"', lambda _: f'workdir = "{work / name / str(next(dirs))}"', text)
    text = re.sub(r'(?m)^python = "[^"]+"', f'python = "{sys.executable}"', text)
    text = re.sub(r'(?m)^plot_path = "[^"]+"', f'plot_path = "{work / "reward.png"}"', text)
    config = work / f"{name}.toml"
    config.write_text(text)
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "launcher.console.cli", str(config), "--no-logs"], capture_output=True,
                          text=True, timeout=1200, cwd=root)  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"{name}: no RESULT line (exit {done.returncode}): {(done.stdout + done.stderr)[-2000:]}")
    return done.stdout, json.loads(lines[-1].removeprefix("RESULT "))
