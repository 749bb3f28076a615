"""What a step cost its host: CPU use (system-wide and this process), load and memory, for steps.jsonl."""

from __future__ import annotations

import os
import socket
from typing import Any

import psutil

_PROCESS = psutil.Process()
psutil.cpu_percent(interval=None)  # the first reading of each counts from here, not from boot
_PROCESS.cpu_percent(interval=None)


def host_usage() -> dict[str, Any]:
    """This host's name (hosts.toml's, else the hostname) and its CPU use since the previous call."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "host": os.environ.get("MILES_HOST") or socket.gethostname(),
        "cpu_percent": psutil.cpu_percent(interval=None),
        "process_cpu_percent": _PROCESS.cpu_percent(interval=None),
        "cpu_count": psutil.cpu_count() or 1,
        "load_1m": load[0],
        "memory_percent": psutil.virtual_memory().percent,
    }
