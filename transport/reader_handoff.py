"""Who reads an endpoint's socket: the state of the hand-off between the event loop and threads that wait on it.

A thread waiting for a reply reads the socket itself, so the reply wakes that thread directly.
"""

from __future__ import annotations

import asyncio
import enum
import math
import os
import threading
import time
from collections.abc import Callable

from transport.waker import Waker

_RECHECK_MIN_S = 0.001  # a loop that left the socket to a waiting thread looks again after this ...
_RECHECK_MAX_S = 0.01  # ... doubling up to this, until no thread waits
#: A thread that has waited through a whole recheck at the longest interval (an idle actor's lane thread, a caller
#: blocked on a long call) wakes the loop itself when it stops waiting; until then the loop only looks this often.
_IDLE_WATCH_S = 1.0
#: The most messages one reader hands up before it lets others run.
DRAIN_BATCH = 512
_sched_yield = getattr(os, "sched_yield", lambda: time.sleep(0))


class Reader(enum.Enum):
    NEW = "new"  # not started, nobody reads
    LOOP = "loop"  # the loop watches the socket's descriptor
    # The loop still reads, but a thread inside receive_here asked it to step aside (once; the loop answers soon).
    PAUSE_ASKED = "pause asked"
    # The loop left the socket to the waiting threads and looks again after 1, 2, 4 ... 10 ms; it takes the socket
    # back once no thread has waited since its last look.
    THREADS = "threads"
    # A thread has waited through a whole look at the longest interval (an idle actor's lane thread, a caller
    # blocked on a long call): the loop looks only once a second, and the last waiting thread to leave wakes it.
    IDLE_WATCH = "idle watch"
    CLOSED = "closed"  # the socket is closed; nobody reads any more


#: The moves the hand-off may make (any state may close).
MOVES: dict[Reader, frozenset[Reader]] = {
    Reader.NEW: frozenset({Reader.LOOP, Reader.CLOSED}),
    Reader.LOOP: frozenset({Reader.PAUSE_ASKED, Reader.THREADS, Reader.CLOSED}),
    Reader.PAUSE_ASKED: frozenset({Reader.LOOP, Reader.THREADS, Reader.CLOSED}),
    Reader.THREADS: frozenset({Reader.LOOP, Reader.IDLE_WATCH, Reader.CLOSED}),
    Reader.IDLE_WATCH: frozenset({Reader.LOOP, Reader.THREADS, Reader.CLOSED}),
    Reader.CLOSED: frozenset(),
}

# Plain globals: compared per message.
_NEW, _LOOP, _PAUSE_ASKED, _THREADS, _IDLE_WATCH, _CLOSED = (Reader.NEW, Reader.LOOP, Reader.PAUSE_ASKED,
                                                         Reader.THREADS, Reader.IDLE_WATCH, Reader.CLOSED)  # fmt: skip


class ReaderHandoff:
    """Who reads one endpoint's socket, and both sides of the hand-off: the loop's, and that of a thread inside
    :meth:`receive_here`. The endpoint reads ``reader`` and ``waiters`` (under its lock) on its send path.

    A :class:`~transport.endpoints.ZmqEndpoint` owns one: it decides who reads and when the loop steps aside and
    looks again; the endpoint itself receives and hands messages up (the callables it gives the hand-off)."""

    def __init__(
        self,
        name: str,
        fd: int,
        lock: threading.Lock,
        *,
        receive_batch: Callable[[], int],
        has_input: Callable[[], bool],
        on_loop: Callable[[Callable[[], None]], None],
    ) -> None:
        """``fd``: the descriptor to watch; ``lock``: the endpoint's, guarding the socket and this state;
        ``receive_batch``: read and hand up what waits, up to :data:`DRAIN_BATCH` messages; ``has_input``: whether
        a message waits (lock held); ``on_loop``: run a function on the loop thread (at once when already there)."""
        self.name = name
        self._fd = fd
        self._lock = lock
        self._receive_batch = receive_batch
        self._has_input = has_input
        self._on_loop = on_loop
        self._loop: asyncio.AbstractEventLoop | None = None  # start()
        self.reader = _NEW
        self.waiters: list[Waker] = []  # threads inside receive_here
        self._read_requested = False  # a resume of the loop's reading is scheduled
        self._drain_scheduled = False
        self._waited_since_recheck = False  # a thread was inside receive_here since the loop last looked
        self._recheck_s = _RECHECK_MIN_S
        self._recheck_timer: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop starts reading (call on ``loop``)."""
        self._loop = loop
        self._resume_reading()

    def close(self) -> list[Waker]:
        """Nobody reads any more (lock held): the loop stops watching; returns the threads to wake once the socket
        is closed (they poll a descriptor that will be gone)."""
        loop_reads = self.reader is _LOOP or self.reader is _PAUSE_ASKED
        self._move(_CLOSED)
        if loop_reads and self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._fd)
        return list(self.waiters)

    def _move(self, to: Reader) -> None:
        """Move the hand-off to ``to`` (lock held); a move that :data:`MOVES` lacks is a bug. Every move is made
        here, and only when the reader changes: never per message."""
        if to not in MOVES[self.reader]:
            raise RuntimeError(f"{self.name}: the reader cannot go from {self.reader.name} to {to.name}")
        self.reader = to

    def _resume_reading(self) -> None:
        """The loop reads the socket (again), and drains what waits."""
        self._read_requested = False
        reader = self.reader
        if reader is _CLOSED:
            return
        if reader is not _LOOP and reader is not _PAUSE_ASKED:  # only the loop moves to LOOP: no race to lose
            with self._lock:
                if self.reader is _CLOSED:
                    return
                self._move(_LOOP)
                self._loop.add_reader(self._fd, self._drain)
        self._schedule_drain()

    def _drain(self) -> None:
        """The loop reads what waits, unless a thread waits in receive_here: then it leaves the socket to it."""
        self._drain_scheduled = False
        with self._lock:
            waiting = bool(self.waiters)
            if waiting and (self.reader is _LOOP or self.reader is _PAUSE_ASKED):
                self._leave_to_threads()
        if not waiting and self._receive_batch() >= DRAIN_BATCH:
            self._schedule_drain()  # more may be waiting: yield to other tasks first

    def _leave_to_threads(self) -> None:
        """A thread waits in receive_here: leave the socket to it, and look again later (lock held; the loop
        reads)."""
        self._move(_THREADS)
        self._loop.remove_reader(self._fd)
        self._recheck_s = _RECHECK_MIN_S
        self._recheck_after(self._recheck_s)

    def _recheck_after(self, delay_s: float) -> None:
        """Schedule the one pending recheck (on the loop)."""
        if self._recheck_timer is not None:
            self._recheck_timer.cancel()
        self._recheck_timer = self._loop.call_later(delay_s, self._recheck)

    def _waited(self) -> bool:
        """Whether a thread waits in receive_here now or has since the last recheck (lock held)."""
        return bool(self.waiters) or self._waited_since_recheck

    def _pause_if_waited(self) -> None:
        """A thread asked the loop to step aside: it does, if a thread still waits (or waited meanwhile)."""
        with self._lock:
            if self.reader is _PAUSE_ASKED:
                if self._waited():
                    self._leave_to_threads()
                else:
                    self._move(_LOOP)

    def _recheck(self) -> None:
        """While paused: resume reading once no thread has waited since the last look (after 1, 2, 4 ... 10 ms).
        Threads that wait again and again (a loop of sync calls) keep the socket to themselves."""
        self._recheck_timer = None
        if self.reader is not _THREADS and self.reader is not _IDLE_WATCH:
            return
        with self._lock:
            waiting = self._waited()
            # A thread inside receive_here all along since a look at the longest interval: it waits for long.
            idle = self._recheck_s >= _RECHECK_MAX_S and bool(self.waiters) and not self._waited_since_recheck
            self._waited_since_recheck = False
            watch = _IDLE_WATCH if idle else _THREADS
            if waiting and self.reader is not watch:
                self._move(watch)
        if not waiting:
            self._resume_reading()
            return
        if idle:  # no timer per 10 ms for an idle actor: the thread tells us when it leaves
            self._recheck_after(_IDLE_WATCH_S)
            return
        self._recheck_s = min(2 * self._recheck_s, _RECHECK_MAX_S)
        self._recheck_after(self._recheck_s)

    def _end_idle_watch(self) -> None:
        """The long-waiting thread left receive_here: look again soon, as after any pause."""
        if self.reader is _THREADS or self.reader is _IDLE_WATCH:
            self._recheck_s = _RECHECK_MIN_S
            self._recheck_after(self._recheck_s)

    def _schedule_drain(self) -> None:
        if not self._drain_scheduled and self.reader is not _CLOSED:
            self._drain_scheduled = True
            self._loop.call_soon(self._drain)

    # ---- a waiting thread's side ------------------------------------------------------------------------------

    def nudge(self) -> None:
        """Input may be waiting that no reader was woken for: wake a waiting thread, or else the loop."""
        waiter = next(iter(self.waiters), None)
        if waiter is not None:
            waiter.wake()
        elif not self._read_requested:
            self._read_requested = True
            self._on_loop(self._resume_reading)

    def receive_here(self, timeout_s: float, waker: Waker, *, spin_s: float = 0.0) -> None:
        """Receive on the calling thread: handle what has arrived, or else wait up to ``timeout_s`` for input
        (or for ``waker``) and handle that. ``on_frames`` then runs on this thread.

        A thread that blocks on a reply takes it straight off the socket: the reply wakes that thread, not
        the loop thread, which would then have to wake it (two thread switches, not one). ``spin_s``: first
        poll the socket for this long without sleeping (only the first waiting thread does): a reply that comes
        within it is taken with no wake-up at all, which on a virtual machine saves tens of microseconds.
        """
        with self._lock:
            if self.reader is _CLOSED:
                return
            self.waiters.append(waker)
            self._waited_since_recheck = True
            first = len(self.waiters) == 1
            ask_loop_to_pause = self.reader is _LOOP
            if ask_loop_to_pause:
                self._move(_PAUSE_ASKED)
        if ask_loop_to_pause:  # else it would race this thread for the reply (once: it stays paused while we wait)
            self._loop.call_soon_threadsafe(self._pause_if_waited)
        received = 0
        try:
            if first and spin_s > 0:
                self._spin(spin_s)  # returns as soon as input is there
            received = self._receive_batch()
            if received == 0:
                for fd, _ in waker.poller(self._fd).poll(max(0, math.ceil(timeout_s * 1000))):
                    if fd == waker.fd:
                        waker.clear()
                received = self._receive_batch()
        finally:
            with self._lock:
                self.waiters.remove(waker)
                wake_loop = self.reader is _IDLE_WATCH and not self.waiters
                if wake_loop:
                    self._move(_THREADS)
            if wake_loop:
                self._on_loop(self._end_idle_watch)
        if received >= DRAIN_BATCH:
            self.nudge()  # this thread stops here with input left: someone else must read it

    def _spin(self, spin_s: float) -> None:
        """Poll the socket for up to ``spin_s`` or until input came, yielding the CPU between polls: on a busy
        machine the threads that bring the reply (ZeroMQ's I/O threads, the actor's) may be queued on this core,
        and a spin that holds it until preempted delays the very reply it waits for (the slowest 1% of calls)."""
        until = time.perf_counter() + spin_s
        while time.perf_counter() < until:
            with self._lock:
                if self.reader is _CLOSED or self._has_input():
                    return
            _sched_yield()  # releases the GIL too
