"""While the job runs: a console line every ``[job] heartbeat_s`` (its elapsed time and the time since its last
output line), ``[job] timeout_s`` (none by default), and the state file kept current for ``miles-launch status``;
a job that hangs otherwise runs forever without a word."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from launcher.config.hosts_config import JobConfig
from launcher.launch.launch_phase import RUNNING_JOB, LaunchPhase, duration

TIMEOUT_EXIT_CODE = 124
_SAVE_EVERY_S = 1.0  # how often a new output time reaches the state file at most


class JobTimedOut(BaseException):
    """The job ran past ``[job] timeout_s`` (a BaseException: a job's ``except Exception`` does not swallow it)."""


class _Watched:
    """A text stream whose writes count as the job's output."""

    def __init__(self, stream: TextIO, seen: Callable[[], None]) -> None:
        self._stream, self._seen = stream, seen

    def write(self, text: str) -> int:
        if text.strip():
            self._seen()
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class JobWatch:
    """Context manager around the job's run.

    The last output is the last line the job printed (an entrypoint's prints: its ``sys.stdout``/``sys.stderr`` are
    watched while it runs) or one of its workers' lines on the console; a command job's own output goes straight to
    the terminal and is not seen, its workers' is. Past ``timeout_s`` the job is interrupted (:class:`JobTimedOut`
    raised in it, like a Ctrl-C) and the launch tears down with exit code 124, as ``timeout(1)`` does."""

    def __init__(
        self, job: JobConfig, phase: LaunchPhase, *, say: Callable[[str], None], save_state: Callable[[], None]
    ) -> None:
        self.job, self.phase = job, phase
        self._say, self._save_state = say, save_state
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._streams: tuple[Any, Any] | None = None
        self._previous_alarm: Any = None

    def __enter__(self) -> JobWatch:
        self.phase.enter(RUNNING_JOB)
        self._save_state()
        if self.job.entrypoint is not None:
            self._streams = (sys.stdout, sys.stderr)
            sys.stdout = _Watched(sys.stdout, self.phase.output)  # type: ignore[assignment]
            sys.stderr = _Watched(sys.stderr, self.phase.output)  # type: ignore[assignment]
        timeout = self.job.timeout_s
        if timeout is not None and threading.current_thread() is threading.main_thread():
            self._previous_alarm = signal.signal(signal.SIGALRM, self._timed_out)
            signal.setitimer(signal.ITIMER_REAL, timeout)
        self._thread = threading.Thread(target=self._tick, name="job-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._previous_alarm is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous_alarm)
        if self._streams is not None:
            sys.stdout, sys.stderr = self._streams
        if self._thread is not None:
            self._thread.join(timeout=5)

    def line(self) -> str:
        """``job running for 5m00s; last output 2m10s ago``."""
        record = self.phase.record()
        now = time.time()
        elapsed = now - (record["job_started_at"] or now)
        last = record["last_output_at"]
        output = f"last output {duration(now - last)} ago" if last else "no output yet"
        limit = f" of its {duration(self.job.timeout_s)} timeout" if self.job.timeout_s is not None else ""
        return f"job running for {duration(elapsed)}{limit}; {output}"

    def _timed_out(self, _signum: int, _frame: Any) -> None:
        raise JobTimedOut(f"the job ran past [job] timeout_s = {self.job.timeout_s:g}s ({self.line()})")

    def _tick(self) -> None:
        heartbeat = self.job.heartbeat_s
        next_line = time.monotonic() + heartbeat if heartbeat > 0 else float("inf")
        saved_output = self.phase.last_output_at
        while not self._stop.wait(min(_SAVE_EVERY_S, max(0.05, next_line - time.monotonic()))):
            if self.phase.last_output_at != saved_output:
                saved_output = self.phase.last_output_at
                self._save_state()
            if time.monotonic() >= next_line:
                self._say(self.line())
                next_line += heartbeat
