"""Work handed to an event loop from other threads, run in batches: one wake-up of the loop runs all of it."""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class LoopWork:
    """Runs callables on ``loop`` (whose thread is ``loop_thread``) in the order they were handed over."""

    def __init__(self, loop: asyncio.AbstractEventLoop, loop_thread: int, *, name: str) -> None:
        self._loop = loop
        self._loop_thread = loop_thread
        self._name = name
        self._work: collections.deque[Callable[[], Any]] = collections.deque()
        self._scheduled = False

    def on_loop_thread(self) -> bool:
        """Whether the calling thread is the loop's."""
        return threading.get_ident() == self._loop_thread

    def run_soon(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the loop: at once when called there (or when the loop is gone), else soon."""
        if threading.get_ident() == self._loop_thread or self._loop.is_closed():
            fn()
            return
        self._work.append(fn)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon_threadsafe(self._run)

    def _run(self) -> None:
        self._scheduled = False  # first: work handed over from now on schedules another run
        work = self._work
        while work:
            try:
                work.popleft()()
            except Exception:  # e.g. the socket closed during shutdown: the rest must still run
                log.exception("%s: work handed to the loop failed", self._name)

    def run_later(self, delay_s: float, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the loop in ``delay_s`` seconds (at once when the loop is gone, e.g. at exit)."""
        if self._loop.is_closed() or not self._loop.is_running():
            fn()
        else:
            self.run_soon(lambda: self._loop.call_later(delay_s, fn))
