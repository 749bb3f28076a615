"""Where a launch is (connecting, starting, running the job, tearing down), since when, and when the job last
printed: one record the console's steps set and ``miles-launch status`` reads from the state file, so both agree."""

from __future__ import annotations

import threading
import time
from typing import Any

CONNECTING = "connecting"
STARTING = "starting"
RUNNING_JOB = "running job"
TEARING_DOWN = "tearing down"


class LaunchPhase:
    """The launch's phase and its times (wall clock, so another process can tell how long ago)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started_at = time.time()
        self.phase = CONNECTING
        self.phase_since = self.started_at
        self.job_started_at: float | None = None
        self.last_output_at: float | None = None

    def enter(self, phase: str) -> None:
        """The launch moved on to ``phase``."""
        with self._lock:
            self.phase, self.phase_since = phase, time.time()
            if phase == RUNNING_JOB:
                self.job_started_at = self.phase_since

    def output(self) -> None:
        """The job (or one of its workers) printed a line now."""
        self.last_output_at = time.time()

    def record(self) -> dict[str, Any]:
        """What the state file keeps of it."""
        with self._lock:
            return {
                "phase": self.phase,
                "phase_since": self.phase_since,
                "started_at": self.started_at,
                "job_started_at": self.job_started_at,
                "last_output_at": self.last_output_at,
            }


def duration(seconds: float) -> str:
    """``0m42s``, ``3m05s``, ``2h07m``."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def ago(record: dict[str, Any], key: str, now: float | None = None) -> float | None:
    """Seconds since ``record[key]`` (None when it is not set)."""
    when = record.get(key)
    if not isinstance(when, (int, float)):
        return None
    return round((time.time() if now is None else now) - when, 1)
