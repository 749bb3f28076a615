"""Helpers of the fault-injection tests: process control with deadlines, memory, HTTP, Prometheus's API."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

HERE = Path(__file__).resolve().parent


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB."""
    return psutil.Process(pid).memory_info().rss / (1 << 20)


def http_get(url: str, timeout_s: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.read()


def stop_process(popen: subprocess.Popen[Any], grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; always reaped."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(5.0)


def read_line(popen: subprocess.Popen[str], prefix: str, timeout_s: float) -> dict[str, Any]:
    """The JSON after ``prefix`` on the first such stdout line; fails the test if it does not come in time."""
    deadline = time.monotonic() + timeout_s
    assert popen.stdout is not None
    while time.monotonic() < deadline:
        readable, _, _ = select.select([popen.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not readable:
            break
        line = popen.stdout.readline()
        if not line:
            if popen.poll() is not None:
                pytest.fail(f"process {popen.args} exited with code {popen.returncode} before printing {prefix!r}")
            continue
        if line.startswith(prefix):
            return json.loads(line[len(prefix) :])
    pytest.fail(f"process {popen.args} printed no {prefix!r} line within {timeout_s} s")


@dataclass
class LossyLinkProcess:
    """A running ``lossy_proxy.py``; ``stop()`` returns its counters."""

    popen: subprocess.Popen[str]
    address: str
    stats: dict[str, int] = field(default_factory=dict)

    def stop(self) -> dict[str, int]:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                out, _ = self.popen.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                out, _ = self.popen.communicate(timeout=5)
            for line in out.splitlines():
                if line.startswith("LOSSY_PROXY_STATS "):
                    self.stats = json.loads(line.split(" ", 1)[1])
        return self.stats
