"""The launcher's state file ``{launcher.workdir}/state.json``: launcher pid and the pids on every host.

``miles-launch status`` and ``miles-launch down`` read it to report on, or stop, a launch started elsewhere.
Pids are stored with their create_time so a reused pid is never mistaken for (or killed as) a worker.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import psutil

from launcher.config.hosts_config import ClusterConfig

STATE_FILE = "state.json"


def state_path_for(config: ClusterConfig) -> Path:
    """Where the state file of launches of ``config`` lives."""
    return Path(config.launcher.workdir) / STATE_FILE


def write_state(
    path: Path, config: ClusterConfig, hosts: dict[str, Any], *, launch: dict[str, Any] | None = None
) -> None:
    """Atomically write the state file (launcher pid + per-host agent and worker pids; ``launch``: its phase and
    times, launcher/launch/launch_phase.py)."""
    me = psutil.Process()
    data = {
        "version": 1,
        "launcher": {"pid": me.pid, "create_time": me.create_time(), "hostname": os.uname().nodename},
        "config": str(config.source) if config.source else None,
        "updated_at": time.time(),
        "hosts": hosts,
        "launch": launch,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def read_state(path: Path) -> dict[str, Any] | None:
    """The state file's content, or None if there is none."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise OSError(f"state file {path} is unreadable: {exc}") from None


def process_alive(pid: int | None, create_time: float | None) -> bool:
    """True if ``pid`` runs and is the same process (create_time) as recorded."""
    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return create_time is None or abs(proc.create_time() - create_time) < 0.01
    except psutil.Error:
        return False
