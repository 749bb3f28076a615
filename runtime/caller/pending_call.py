"""A call in flight as its caller sees it: ``await call`` in async code, ``call.result(timeout)`` in plain code."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Generator
from typing import Any

from runtime.caller.call import Call
from runtime.caller.call_future import CallFuture, follow
from runtime.caller.client import ClientRuntime
from runtime.caller.connection import Connection
from runtime.core.call_ids import new_call_id
from runtime.core.errors import DeadlineExceeded
from transport.codec import encode


class PendingCall:
    """A call in flight. ``await call`` in async code, ``call.result(timeout)`` in plain code."""

    __slots__ = ("_call", "_conn", "_future", "_runtime", "_site")

    def __init__(self, call: Call, conn: Connection, runtime: ClientRuntime, site: str) -> None:
        self._call = call
        self._conn = conn
        self._runtime = runtime
        self._site = site
        self._future: CallFuture | None = None

    @property
    def call_id(self) -> str:
        return self._call.call_id.hex()

    @property
    def future(self) -> concurrent.futures.Future[Any]:
        """The call as a ``concurrent.futures.Future``. Its done-callbacks run on the thread that read the reply
        when that is a thread waiting in ``.result()``, else on this process's callback thread: never on an event
        loop, so a callback may wait for another call. Cancelling it gives the call up locally."""
        if self._future is None:
            self._future = follow(self._call.future)
        return self._future

    def done(self) -> bool:
        return self._call.future.done()

    def cancel(self) -> bool:
        """Cancel the call: one still queued on the actor never runs; a running async method sees CancelledError
        (in its coroutine); a running sync method cannot be interrupted and runs to its end, its result dropped.
        From now on ``result()`` raises ``concurrent.futures.CancelledError`` and ``await`` raises
        ``asyncio.CancelledError``. Returns False when the call had already finished (nothing is cancelled)."""
        if not self._call.future.cancel():
            return False
        if self._conn.withdraw(self._call):  # never sent (waiting for the socket or a restart): nothing to tell
            return True
        request = Call(new_call_id(), "__cancel__", encode([[[self._call.call_id]], {}]), None, None)
        self._conn.submit(request)  # its answer (whether it was still queued or running) matters to nobody
        return True

    def __await__(self) -> Generator[Any, None, Any]:
        return asyncio.wrap_future(self._call.future).__await__()

    def result(self, timeout: float | None = None) -> Any:
        """Block until the result arrives; ``timeout`` (s) bounds the wait (the call itself may go on)."""
        if self._runtime.on_loop_thread():
            raise RuntimeError(f"{self._site}: .result() would block the event loop it waits on; use await")
        started = time.monotonic()
        self._conn.wait(self._call, timeout)
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        try:
            return self._call.future.result(left)
        except concurrent.futures.TimeoutError:
            if self._call.future.done():  # the call's own DeadlineExceeded (a TimeoutError too): keep its message
                raise
            raise DeadlineExceeded(
                f"{self._site}: no result within timeout={timeout} s; the call may still be running"
            ) from None
