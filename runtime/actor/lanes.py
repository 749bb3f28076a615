"""Where actor methods run: thread lanes for sync methods, one per concurrency group (the default group is a lane
of one thread: its calls run one at a time, in submission order)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from transport.waker import Waker

log = logging.getLogger(__name__)

Job = Callable[[], Any]


class ThreadLane:
    """``threads`` worker threads sharing one FIFO queue; each result goes to ``deliver`` on its own thread (the
    server records and sends the result from there: an answer does not wait for a hand-off back to the loop).

    ``idle_receive(waker)``: what an idle thread does instead of sleeping on the queue; it must return soon
    after ``waker`` is woken (a job was queued) and may queue jobs itself. It returns False when it cannot
    receive any more (the socket closed): idle threads then sleep on the queue. A call that arrives for an idle
    lane is so taken off the socket and run by the same thread, with no hand-off at all.
    """

    def __init__(
        self,
        name: str,
        threads: int,
        deliver: Callable[[Any], None],
        *,
        idle_receive: Callable[[Waker], bool] | None = None,
    ) -> None:
        self.name = name
        self._deliver = deliver
        self._idle_receive = idle_receive
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._idle: list[Waker] = []  # threads inside idle_receive
        self._idle_lock = threading.Lock()
        self._busy = 0
        self.failures = 0  # exceptions that escaped a job, a delivery or an idle read (each one logged)
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

    def submit(self, job: Job | None) -> None:
        self._queue.put(job)
        with self._idle_lock:
            idle = self._idle[0] if self._idle else None
        if idle is not None:
            idle.wake()

    def _next_job(self, waker: Waker) -> Job | None:
        while True:
            try:
                return self._queue.get_nowait()
            except queue.Empty:
                if self._idle_receive is None:
                    return self._queue.get()
            with self._idle_lock:
                self._idle.append(waker)
            try:
                # A job queued before this thread was listed woke nobody: look once more before waiting.
                if self._queue.empty() and not self._idle_receive(waker):
                    self._idle_receive = None
            except Exception:  # the loop reads the socket too: this thread falls back to sleeping on the queue
                self._failed("reading the socket while idle")
                self._idle_receive = None
            finally:
                with self._idle_lock:
                    self._idle.remove(waker)

    def _work(self) -> None:
        # A lane thread never dies while its lane is open: whatever escapes a job, its delivery or an idle read is
        # logged and counted (failures), and the thread goes on to the next job.
        waker = Waker.for_this_thread()
        while True:
            job = self._next_job(waker)
            if job is None:
                return
            self._busy += 1
            try:
                done = job()
            except BaseException:  # jobs answer their own calls: this is a bug, reported, never a dead lane
                self._failed("a job raised")
                continue
            finally:
                self._busy -= 1
            try:
                self._deliver(done)
            except BaseException:  # e.g. the socket closed during shutdown: the lane must keep serving
                self._failed("delivering a result failed")

    def _failed(self, what: str) -> None:
        self.failures += 1
        log.exception("lane %s: %s; the lane keeps serving", self.name, what)

    def discard_queued(self) -> int:
        """Drop the jobs not yet started (the process is leaving and has answered their calls); how many."""
        dropped = 0
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return dropped
            if job is None:  # a stop request: keep it
                self._queue.put(None)
                return dropped
            dropped += 1

    def stop(self) -> None:
        """Let the threads exit once the jobs already queued have run."""
        for _ in self._threads:
            self.submit(None)
