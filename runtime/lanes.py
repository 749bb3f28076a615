"""Where actor methods run: thread lanes for sync methods, one per concurrency group.

A lane with one thread runs its calls one at a time in submission order (the default group is such a lane).
Each finished job goes to ``deliver`` on the thread that ran it: the server records the result and sends it
from there, so a call's answer does not wait for a hand-off back to the event loop.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

Job = Callable[[], Any]


class ThreadLane:
    """``threads`` worker threads sharing one FIFO queue; each result goes to ``deliver`` on its own thread."""

    def __init__(self, name: str, threads: int, deliver: Callable[[Any], None]) -> None:
        self.name = name
        self._deliver = deliver
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._busy = 0
        self._threads = [
            threading.Thread(target=self._work, name=f"lane-{name}-{index}", daemon=True) for index in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def busy(self) -> int:
        """Jobs running right now."""
        return self._busy

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    def submit(self, job: Job) -> None:
        self._queue.put(job)

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            self._busy += 1
            try:
                done = job()
            finally:
                self._busy -= 1
            try:
                self._deliver(done)
            except Exception:  # e.g. the socket closed during shutdown: the lane must keep serving
                log.exception("lane %s: delivering a result failed", self.name)

    def stop(self) -> None:
        """Let the threads exit once the jobs already queued have run."""
        for _ in self._threads:
            self._queue.put(None)
