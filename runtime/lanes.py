"""Where actor methods run: thread lanes for sync methods, one per concurrency group.

A lane with one thread runs its calls one at a time in submission order (the default group is such a lane).
Finished work is handed back to the event loop in batches: one wake-up carries every result that completed
since the last one, which keeps the cross-thread cost per call low under load.
"""

from __future__ import annotations

import asyncio
import collections
import queue
import threading
from collections.abc import Callable
from typing import Any

Job = Callable[[], Any]


class ThreadLane:
    """``threads`` worker threads sharing one FIFO queue; results go to ``deliver`` on the loop thread."""

    def __init__(
        self, name: str, threads: int, loop: asyncio.AbstractEventLoop, deliver: Callable[[Any], None]
    ) -> None:
        self.name = name
        self._loop = loop
        self._deliver = deliver
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._done: collections.deque[Any] = collections.deque()
        self._wake_pending = False
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
                self._done.append(job())
            finally:
                self._busy -= 1
            if not self._wake_pending:
                self._wake_pending = True
                try:
                    self._loop.call_soon_threadsafe(self._deliver_all)
                except RuntimeError:  # loop closed during shutdown
                    return

    def _deliver_all(self) -> None:
        self._wake_pending = False
        done = self._done
        while done:
            self._deliver(done.popleft())

    def stop(self) -> None:
        """Let the threads exit once the jobs already queued have run."""
        for _ in self._threads:
            self._queue.put(None)
