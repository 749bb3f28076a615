"""A streaming call from this process: ``for x in handle.gen(...)`` / ``async for x in handle.gen(...)``."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from runtime.core.errors import ActorError, DeadlineExceeded
from transport.timeouts import within

DEFAULT_WINDOW = 16  # items the producer may run ahead of the caller
PULL_WAIT_S = 5.0  # how long one __stream_next__ waits on the actor for an item (then asks again)
MAX_WAIT_S = 30.0  # the longest the actor lets one wait (runtime.actor.stream_table.MAX_WAIT_S)
_PULL_MARGIN_S = 30.0  # beyond which a __stream_next__ call itself fails (the actor is unreachable)

Submit = Callable[..., Any]  # a MethodRef: called, returns a PendingCall


class StreamingCall:
    """The items of one call of a generator method, in order. Iterate it once (``for`` or ``async for``);
    ``close()`` stops it early. ``call_id`` names it (as a PendingCall's does).

    After the call is sent, its items come by ``__stream_next__`` calls (:mod:`runtime.actor.stream_table`), each
    bringing what the actor produced since, at most ``window`` items: the producer stops while ``window`` of them
    are unconsumed (backpressure). An error the generator raised is raised when the caller reaches it, after the
    items before it. Leaving the loop early (``break``, an exception, ``close()``, the stream garbage collected)
    closes the generator in the actor."""

    def __init__(self, producer: Any, pull: Submit, close: Submit, window: int, site: str) -> None:
        self._producer = producer  # the call's PendingCall: its result is the stream's end (or error)
        self._pull, self._close = pull, close
        self._key = bytes.fromhex(producer.call_id)
        self.window = window
        self._site = site
        self._buffer: collections.deque[Any] = collections.deque()
        self._consumed = 0
        self._ended = False
        self._iterating = False
        self._lock = threading.RLock()  # a done-callback may run on the thread that holds it
        self._pending: Any = None  # a __stream_next__ in flight for ready(), not yet taken by the iteration
        self._ready: concurrent.futures.Future[None] | None = None

    @property
    def call_id(self) -> str:
        return self._producer.call_id

    @property
    def future(self) -> concurrent.futures.Future[Any]:
        """The call itself: done once the generator has ended in the actor (or failed)."""
        return self._producer.future

    def __repr__(self) -> str:
        return f"StreamingCall({self._site}, consumed={self._consumed}, ended={self._ended})"

    # ---- plain code -----------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        self._start()
        try:
            while True:
                while self._buffer:
                    self._consumed += 1
                    yield self._buffer.popleft()
                if self._ended:
                    return
                if self._take(self._claim().result(timeout=PULL_WAIT_S + _PULL_MARGIN_S)):
                    self._finish(self._ended_sync())
        finally:
            self.close()

    def next(self, timeout: float | None = None) -> Any:
        """The next item (StopIteration at the end); ``timeout`` bounds the wait (DeadlineExceeded)."""
        if not self._buffer and not self._ended:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._buffer and not self._ended:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise DeadlineExceeded(f"{self._site}: no item within timeout={timeout} s")
                wait = PULL_WAIT_S if left is None else min(PULL_WAIT_S, left)
                if self._take(self._claim(wait).result(timeout=wait + _PULL_MARGIN_S)):
                    self._finish(self._ended_sync())
        if not self._buffer:
            raise StopIteration
        self._consumed += 1
        return self._buffer.popleft()

    # ---- async code -----------------------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[Any]:
        self._start()
        return self._items_async()

    async def _items_async(self) -> AsyncIterator[Any]:
        try:
            while True:
                while self._buffer:
                    self._consumed += 1
                    yield self._buffer.popleft()
                if self._ended:
                    return
                if self._take(await self._claim()):
                    self._finish(await self._ended_async())
        finally:
            self.close()

    async def next_async(self) -> Any:
        """The next item (StopAsyncIteration at the end)."""
        while not self._buffer and not self._ended:
            if self._take(await self._claim()):
                self._finish(await self._ended_async())
        if not self._buffer:
            raise StopAsyncIteration
        self._consumed += 1
        return self._buffer.popleft()

    # ---- both -----------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the stream: the actor closes the generator (at its next ``yield``; an async one where it waits);
        items not taken yet are dropped. Nothing happens once it has ended."""
        self._buffer.clear()
        if self._ended:
            return
        self._ended = True
        if not self._producer.done():
            self._close(self._key)  # its answer matters to nobody

    cancel = close

    def __enter__(self) -> StreamingCall:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def _start(self) -> None:
        if self._iterating:
            raise RuntimeError(f"{self._site}: a stream is iterated once (call the method again for another)")
        self._iterating = True

    def _request(self, wait_s: float = PULL_WAIT_S) -> Any:
        return self._pull(self._key, self._consumed, self.window, wait_s)

    def _claim(self, wait_s: float = PULL_WAIT_S) -> Any:
        """The ``__stream_next__`` to wait for: the one :meth:`ready` sent, else a new one (one in flight, ever,
        so items come in order)."""
        with self._lock:
            pending, self._pending = self._pending, None
        return pending if pending is not None else self._request(wait_s)

    def ready(self) -> concurrent.futures.Future[None]:
        """A future done once the next item (or the end) is here, so that taking it does not block (``ray.wait``
        on a generator); it asks the actor in the background meanwhile."""
        with self._lock:
            pending = self._pending
            if self._buffer or self._ended or (pending is not None and pending.future.done()):
                done: concurrent.futures.Future[None] = concurrent.futures.Future()
                done.set_result(None)  # an item, the end or an error is here
                return done
            if self._ready is None or self._ready.done():
                self._ready = concurrent.futures.Future()
                if pending is None:
                    self._watch()
            return self._ready

    def _watch(self) -> None:
        pending = self._pending = self._request(MAX_WAIT_S)
        pending.future.add_done_callback(lambda future: self._pulled(pending, future))

    def _pulled(self, pending: Any, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            empty = future.exception() is None and future.result() == [[], "more"]
            if empty and self._pending is pending:  # nothing yet, and nobody took it: ask again
                self._watch()
                return
            ready = self._ready
        if ready is not None and not ready.done():
            ready.set_result(None)

    def _take(self, answer: Any) -> bool:
        """Keep the items of a ``__stream_next__`` answer; True when the stream ended ("end": the producer is
        done; "unknown": it never opened, its call was refused): its call's outcome then says how."""
        items, state = answer
        if state == "more":
            self._buffer.extend(items)
            return False
        self._ended = True
        return True

    def _ended_sync(self) -> Any:
        try:
            return self._producer.result(timeout=_PULL_MARGIN_S)
        except concurrent.futures.TimeoutError:
            raise DeadlineExceeded(f"{self._site}: the stream ended but its call did not answer") from None

    async def _ended_async(self) -> Any:
        try:
            return await within(asyncio.shield(asyncio.ensure_future(self._producer)), _PULL_MARGIN_S)
        except TimeoutError:
            raise DeadlineExceeded(f"{self._site}: the stream ended but its call did not answer") from None

    def _finish(self, outcome: Any) -> None:
        """Raise what the call raised (a refusal, the generator's error) or why the actor closed the stream."""
        closed = outcome.get("closed") if isinstance(outcome, dict) else None
        if closed is not None:
            raise ActorError(f"{self._site}: the actor closed the stream: {closed}")
