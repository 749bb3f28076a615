"""What ``miles-launch`` prints: timestamped steps on stderr, worker log lines (already prefixed) as they come;
and :class:`Say`, how the launcher's parts report a step (logged, and passed to the caller's ``progress``)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Protocol, TextIO

from launcher.launch.cells import DeathReport


class Say(Protocol):
    """Reports a launcher step: logs it at ``level`` and hands it to the provider's ``progress`` callback."""

    def __call__(self, message: str, level: int = logging.INFO) -> None: ...


class ProgressPrinter:
    """Thread-safe console output for the CLI (library code logs instead)."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self._out = out or sys.stdout
        self._err = err or sys.stderr
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self.on_output: Callable[[], None] | None = None  # a worker's line reached the console (the job's output)

    def step(self, message: str) -> None:
        """A launcher step, e.g. ``ready 3/8 (1.2s)``."""
        self._write(self._err, f"[miles-launch +{time.monotonic() - self._started:6.1f}s] {message}")

    def error(self, message: str) -> None:
        """A failure, one line per line of the message."""
        for line in message.splitlines() or [""]:
            self._write(self._err, f"[miles-launch] error: {line}")

    def warning(self, message: str) -> None:
        """Something the user must weigh before trusting the launch (shown with --no-logs too), per line."""
        for line in message.splitlines() or [""]:
            self._write(self._err, f"[miles-launch] WARNING: {line}")

    def log_line(self, stream: str, text: str) -> None:
        """A worker's output line (``(pool-cell-worker pid=N host=H) ...``), as the hosts' agents filter them
        (``[launcher] stream_logs``)."""
        if self.on_output is not None:
            self.on_output()
        self._write(self._err if stream == "stderr" else self._out, text)

    def raw(self, text: str) -> None:
        """Text as it came (a submitted job's console), on stdout."""
        with self._lock:
            try:
                self._out.write(text)
                self._out.flush()
            except (OSError, ValueError):
                pass

    def death(self, report: DeathReport) -> None:
        """A worker died while its cell was meant to run."""
        self.step(f"WORKER DIED: {report}")

    def _write(self, stream: TextIO, line: str) -> None:
        with self._lock:
            try:
                stream.write(line + "\n")
                stream.flush()
            except (OSError, ValueError):
                pass
