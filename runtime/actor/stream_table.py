"""The streams of one actor server: the items a generator method produced that its caller has not taken yet,
held behind a window so a slow caller holds its producer back instead of filling memory."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Any

from transport.timeouts import within

IDLE_S = 600.0  # a producer waits at most this long for its caller to take items; then the stream closes
MAX_STREAMS = 4096  # streams one actor holds at once (calls past it: over_capacity)
MAX_WINDOW = 1024  # items a caller may let the producer run ahead
MAX_WAIT_S = 30.0  # the longest one __stream_next__ waits
_MAX_ID = 128


class Stream:
    """One streaming call's items and flow control, shared by its producer thread or loop and the server's loop.

    Opened under the call id as soon as a streaming call (:mod:`runtime.core.stream_hints`) is accepted. The
    producer (:mod:`runtime.actor.stream_runner`, on a lane thread or a group loop) puts items in; the caller takes
    them with ``__stream_next__`` calls, each a long poll answered on the server's loop as soon as an item is there
    (or after ``wait_s``, empty). Backpressure: the producer waits while ``window`` items it produced are not yet
    consumed (each ``__stream_next__`` says how many it consumed). ``__stream_close__`` (the caller stopped) closes
    it, and so does :data:`IDLE_S` without a pull, so nothing waits forever: the producer closes the generator at
    its next item. Every argument from the wire is checked before use."""

    def __init__(self, peer: bytes, window: int = 1) -> None:
        self.peer = peer
        self.items: collections.deque[Any] = collections.deque()
        self.produced = 0
        self.consumed = 0  # as the caller last said
        self.delivered = 0  # sent to the caller in __stream_next__ answers
        self.window = window  # until the caller's first __stream_next__ says otherwise
        self.closed: str | None = None  # why the producer must stop (caller closed, idle)
        self.done = False  # the producer finished (its call's RESULT says how)
        self.ended_at = 0.0
        self.task: asyncio.Task[Any] | None = None  # an async producer's task (closing cancels it)
        self._cond = threading.Condition()
        self._waiter: asyncio.Future[None] | None = None  # a __stream_next__ waiting on the server's loop
        self._room: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None  # an async producer waiting

    # ---- the producer's side -----------------------------------------------------------------------------------

    def wait_room(self) -> bool:
        """Wait (a sync producer's thread) until the caller is less than a window behind; False: stop producing.
        Asked before the generator makes its next item, so it never runs more than a window ahead."""
        with self._cond:
            deadline = time.monotonic() + IDLE_S
            while self.closed is None and self.produced - self.consumed >= self.window:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.closed = f"nobody took its items for {IDLE_S:.0f} s"
                    break
                self._cond.wait(left)
            return self.closed is None

    async def wait_room_async(self) -> bool:
        """:meth:`wait_room` for an async producer (its group loop goes on meanwhile)."""
        while True:
            with self._cond:
                if self.closed is not None or self.produced - self.consumed < self.window:
                    return self.closed is None
                room = asyncio.Event()
                self._room = (asyncio.get_running_loop(), room)
            try:
                await within(room.wait(), IDLE_S)
            except TimeoutError:
                with self._cond:
                    self.closed = self.closed or f"nobody took its items for {IDLE_S:.0f} s"

    def put(self, item: Any) -> None:
        """Add an item for the caller (after :meth:`wait_room`); dropped if the stream was closed meanwhile."""
        with self._cond:
            if self.closed is None:
                self.items.append(item)
                self.produced += 1
                self._wake_caller()

    def finish(self) -> None:
        """The producer is done (the generator ended, raised, or was closed)."""
        with self._cond:
            self.done = True
            self.ended_at = time.monotonic()
            self._wake_caller()

    def _wake_caller(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.get_loop().call_soon_threadsafe(_resolve, waiter)

    # ---- the caller's side (the server's loop) -----------------------------------------------------------------

    async def take(self, consumed: int, window: int, wait_s: float) -> tuple[list[Any], bool]:
        """(items, ended): what is there, at most ``window`` of them, waiting up to ``wait_s`` for one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            with self._cond:
                self._credit(consumed, window)
                if self.items:
                    batch = [self.items.popleft() for _ in range(min(window, len(self.items)))]
                    self.delivered += len(batch)
                    return batch, False
                if self.done or self.closed is not None:
                    return [], True
                waiter = self._waiter = loop.create_future()
            left = deadline - loop.time()
            if left <= 0:
                return [], False
            try:
                await within(waiter, left)
            except TimeoutError:
                return [], False

    def _credit(self, consumed: int, window: int) -> None:
        if consumed > self.delivered:
            raise ValueError(f"__stream_next__: consumed={consumed} but only {self.delivered} items were delivered")
        if consumed > self.consumed or window != self.window:
            self.consumed, self.window = max(consumed, self.consumed), window
            self._wake_producer()

    def close(self, reason: str) -> None:
        """Stop the producer (at its next item; an async one at once, its task cancelled)."""
        with self._cond:
            if self.closed is None:
                self.closed = reason
            self.items.clear()
            self._wake_producer()
            task = self.task
        if task is not None and not self.done:
            task.get_loop().call_soon_threadsafe(task.cancel)

    def _wake_producer(self) -> None:
        self._cond.notify_all()
        room, self._room = self._room, None
        if room is not None:
            room[0].call_soon_threadsafe(room[1].set)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class StreamTable:
    """The streams of one server, by call id."""

    def __init__(self) -> None:
        self._streams: dict[bytes, Stream] = {}
        self._closed_early: collections.OrderedDict[tuple[bytes, bytes], None] = collections.OrderedDict()
        self._lock = threading.Lock()

    def open(self, call_id: bytes, peer: bytes) -> Stream | None:
        """A new stream; None when :data:`MAX_STREAMS` are open (ended ones nobody took the end of go first)."""
        with self._lock:
            if len(self._streams) >= MAX_STREAMS:
                cutoff = time.monotonic() - IDLE_S
                for key in [k for k, s in self._streams.items() if s.done and s.ended_at < cutoff]:
                    del self._streams[key]
                if len(self._streams) >= MAX_STREAMS:
                    return None
            stream = self._streams[call_id] = Stream(peer)
            if (peer, call_id) in self._closed_early:  # closed before it started: the generator never runs
                del self._closed_early[(peer, call_id)]
                stream.closed = "its caller closed the stream"
            return stream

    def close_early(self, peer: bytes, call_id: bytes) -> None:
        """A close that came before its stream was opened (the two calls raced): the stream opens closed.
        Bounded (the oldest are forgotten past :data:`MAX_STREAMS`): a peer cannot grow it without end."""
        with self._lock:
            self._closed_early[(peer, call_id)] = None
            while len(self._closed_early) > MAX_STREAMS:
                self._closed_early.popitem(last=False)

    def find(self, peer: bytes, call_id: Any) -> Stream | None:
        """The caller's own stream ``call_id``, or None (unknown, ended, another caller's)."""
        if not isinstance(call_id, bytes) or not 0 < len(call_id) <= _MAX_ID:
            raise ValueError(f"a stream is named by its call id (1-{_MAX_ID} bytes), got {type(call_id).__name__}")
        stream = self._streams.get(call_id)
        return stream if stream is not None and stream.peer == peer else None

    def drop(self, call_id: bytes) -> None:
        with self._lock:
            self._streams.pop(call_id, None)

    def __len__(self) -> int:
        return len(self._streams)


def _count(name: str, value: Any, low: float, high: float) -> None:
    if type(value) not in (int, float) or not low <= value <= high or (name != "wait_s" and type(value) is not int):
        raise ValueError(f"__stream_next__: {name} must be a number in {low}..{high}, got {value!r}")


async def stream_next(table: StreamTable, peer: bytes, call_id: Any, consumed: Any, window: Any, wait_s: Any) -> list:
    """The built-in ``__stream_next__``: ``[items, state]``, state ``more``, ``end`` (the producer is done: its
    call's result says how) or ``unknown`` (no such stream of this caller)."""
    _count("consumed", consumed, 0, 2**62)
    _count("window", window, 1, MAX_WINDOW)
    _count("wait_s", wait_s, 0, MAX_WAIT_S)
    stream = table.find(peer, call_id)
    if stream is None:
        return [[], "unknown"]
    items, ended = await stream.take(consumed, window, float(wait_s))
    if ended:
        table.drop(call_id)
        return [[], "end"]
    return [items, "more"]


def stream_close(table: StreamTable, peer: bytes, call_id: Any) -> bool:
    """The built-in ``__stream_close__``: the caller stopped; True if the stream was still open."""
    stream = table.find(peer, call_id)
    if stream is None:
        table.close_early(peer, call_id)  # not opened yet (or ended): if it opens later, it opens closed
        return False
    stream.close("its caller closed the stream")
    table.drop(call_id)
    return True
