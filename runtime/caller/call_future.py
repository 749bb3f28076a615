"""The future a caller gets from ``PendingCall.future``: its done-callbacks never run on an event loop's thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

Callback = Callable[[concurrent.futures.Future[Any]], object]


class CallFuture(concurrent.futures.Future[Any]):
    """A ``concurrent.futures.Future`` whose callbacks stay off event-loop threads.

    A call is settled by whichever thread reads its reply: a thread blocked in ``.result()``, or the runtime's event
    loop (which also settles deaths and deadlines). A callback run on the loop could not wait for another call
    (``.result()`` there would block the loop that must read the reply) and would stall every other call while it
    ran. So a callback that would run on a loop's thread runs on this process's callback thread instead; anywhere
    else (a thread waiting in ``.result()``), it runs on the spot, as ``concurrent.futures`` does."""

    def add_done_callback(self, fn: Callback) -> None:
        super().add_done_callback(lambda future: _run_off_loop(fn, future))


def follow(source: concurrent.futures.Future[Any]) -> CallFuture:
    """A CallFuture settled like ``source``; cancelling it cancels ``source``."""
    mirror = CallFuture()
    source.add_done_callback(lambda done: _copy_state(done, mirror))
    concurrent.futures.Future.add_done_callback(mirror, lambda done: done.cancelled() and source.cancel())
    return mirror


def _copy_state(source: concurrent.futures.Future[Any], mirror: CallFuture) -> None:
    if source.cancelled():
        mirror.cancel()
        return
    with contextlib.suppress(concurrent.futures.InvalidStateError):  # the caller cancelled the mirror first
        error = source.exception()
        if error is None:
            mirror.set_result(source.result())
        else:
            mirror.set_exception(error)


def _run_off_loop(fn: Callback, future: concurrent.futures.Future[Any]) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # not a loop's thread: here, as concurrent.futures would
        fn(future)
        return
    _CallbackThread.of_this_process().put(fn, future)


class _CallbackThread:
    """One daemon thread per process that runs the callbacks kept off loop threads, in the order they came."""

    _current: _CallbackThread | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._queue: queue.SimpleQueue[tuple[Callback, concurrent.futures.Future[Any]]] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="miles-call-callbacks", daemon=True).start()

    @classmethod
    def of_this_process(cls) -> _CallbackThread:
        """The thread, started on first use (and again in a forked child, which has no threads)."""
        with cls._lock:
            if cls._current is None or cls._current.pid != os.getpid():
                cls._current = cls()
            return cls._current

    def put(self, fn: Callback, future: concurrent.futures.Future[Any]) -> None:
        self._queue.put((fn, future))

    def _run(self) -> None:
        while True:
            fn, future = self._queue.get()
            try:
                fn(future)
            except BaseException:  # even SystemExit: this thread must outlive any one callback
                log.exception("exception calling callback for %r", future)
