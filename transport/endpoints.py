"""asyncio endpoints over plain ZeroMQ sockets (ROUTER and DEALER sockets are opened in transport.sockets).

Driven from the event loop with ``add_reader`` and non-blocking sends, much cheaper per message than awaiting
``zmq.asyncio`` futures; any thread may send, and a thread waiting for a reply may read the socket itself.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import select
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import zmq

from transport.codec import Buffer
from transport.direct_links import DirectLinks
from transport.endpoint_monitor import EndpointMonitor
from transport.link_watch import LinkChange, LinkWatch
from transport.peer_queues import PeerQueues
from transport.protocol import OUT_OF_BAND_THRESHOLD
from transport.reader_handoff import DRAIN_BATCH, Reader, ReaderHandoff
from transport.waker import Waker

log = logging.getLogger(__name__)

# Plain ints: pyzmq's enum wrappers cost microseconds per message on the call path.
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)
#: pyzmq's own send, under its Python wrapper (which only adds draft-socket options): one frame less per part.
_send = zmq.backend.Socket.send
_PEER_RETRY_MIN_S = 0.001  # a ROUTER retries a peer whose pipe is full after this ...
_PEER_RETRY_MAX_S = 0.05  # ... doubling up to this while none of them takes anything
# Plain globals: compared per message.
_LOOP, _PAUSE_ASKED, _CLOSED = Reader.LOOP, Reader.PAUSE_ASKED, Reader.CLOSED


@dataclass
class EndpointStats:
    """Counters kept by one endpoint."""

    messages_in: int = 0
    messages_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    dropped: dict[str, int] = field(default_factory=dict)

    def drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1


class ZmqEndpoint:
    """One socket driven by the running event loop; ``on_frames`` gets every received multipart message.

    Readers: the loop, and any thread inside :meth:`receive_here`. While such a thread waits, the loop stops
    watching the socket (so the reply wakes that thread alone) and looks again after a short, growing delay: who
    reads is the endpoint's :class:`~transport.reader_handoff.ReaderHandoff`.
    """

    def __init__(
        self,
        socket: zmq.Socket,
        on_frames: Callable[[list[Buffer]], None],
        *,
        name: str,
        address: str = "",
        on_handshake_failure: Callable[[str], None] | None = None,
        curve: bool = False,
        on_close: Callable[[], None] | None = None,
        connection_counts: Callable[[], dict[str, int]] | None = None,
        on_link: Callable[[LinkChange, str], None] | None = None,
        link_watch: LinkWatch | None = None,
        max_queued_per_peer: int | None = None,
        direct: DirectLinks | None = None,
    ) -> None:
        """``max_queued_per_peer``: for a ROUTER (every message starts with the peer's routing id), the bound of
        each peer's own queue (:class:`~transport.peer_queues.PeerQueues`); None for other sockets, which have one
        queue. ``direct``: the same-host direct links that carry messages beside the socket while they are up
        (:mod:`transport.direct_links`); readers then watch both."""
        self.socket = socket
        self._on_close = on_close
        self._connection_counts = connection_counts
        self.name = name
        self.address = address  # what the socket is bound or connected to
        self.stats = EndpointStats()
        self._fd = self._zmq_fd = socket.FD
        self._direct = direct
        self._sources: select.epoll | None = None  # the socket's and the direct links' descriptors, as one
        if direct is not None:
            self._sources = select.epoll()
            self._sources.register(self._zmq_fd, select.EPOLLIN)
            self._sources.register(self._direct.fd, select.EPOLLIN)
            self._fd = self._sources.fileno()
        self._on_frames = on_frames
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        # Every use of the socket, from any thread: ZeroMQ allows a socket to move between threads behind a full
        # memory barrier, which the lock gives.
        self._lock = threading.Lock()
        # One reader at a time, so on_frames runs in arrival order; reentrant, because a handler's callback may
        # itself wait for a reply on this socket (a done-callback calling .result()) and must then read it.
        self._receive_lock = threading.RLock()
        self._pending: collections.deque[list[Buffer]] = collections.deque()  # waiting for writability
        self._peers: PeerQueues | None = None  # a ROUTER's messages for peers whose pipes are full
        self._peer_retry_s = _PEER_RETRY_MIN_S
        self._peer_retry_scheduled = False
        if max_queued_per_peer is not None:
            self._peers = PeerQueues(max_queued_per_peer, self._try_send, self.stats)
            self._queue_put = self._peers.put  # type: ignore[method-assign]
        self._outbox: collections.deque[list[Buffer]] = collections.deque()  # waiting for the loop
        self._flush_requested = False  # a flush of the outbox is scheduled on the loop
        self._handoff = ReaderHandoff(
            name, self._fd, self._lock, receive_batch=self._receive_batch, has_input=self._has_input,
            on_loop=self._on_loop,
        )  # fmt: skip
        # A DEALER's handshake failures and link changes (transport.endpoint_monitor).
        self._monitor = EndpointMonitor(
            socket, name=name, curve=curve, on_handshake_failure=on_handshake_failure, on_link=on_link,
            link_watch=link_watch,
        )  # fmt: skip

    def start(self) -> None:
        """Begin reading; must be called on the loop that will own the socket."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        if self._direct is not None:
            self._direct.start(self._loop, self._on_loop, self._lock, self.stats)
        self._handoff.start(self._loop)
        self._monitor.start(self._loop)

    def connections(self) -> dict[str, int]:
        """Open and refused connections of a bound socket (see transport.zap_gate); empty for others."""
        return self._connection_counts() if self._connection_counts is not None else {}

    @property
    def closed(self) -> bool:
        return self._handoff.reader is _CLOSED

    def receive_here(self, timeout_s: float, waker: Waker, *, spin_s: float = 0.0) -> None:
        """Receive on the calling thread while it waits for a reply (:meth:`ReaderHandoff.receive_here`)."""
        self._handoff.receive_here(timeout_s, waker, spin_s=spin_s)

    # ---- sending ---------------------------------------------------------------------------------------------

    def send(self, frames: list[Buffer]) -> None:
        """Send a multipart message from any thread; large frames go without copying.

        A thread sends at once when the socket is free, which saves the hand-off to the loop thread and back (the
        largest cost of a synchronous call). When another thread is using it, the message joins an outbox that the
        loop sends in one go: nobody waits for the socket, and messages keep their order. If the socket is full
        (the high-water mark), messages wait in a queue that the loop flushes once it is writable again. Nothing is
        dropped on the sending side, but by a ROUTER for a peer that stops reading: its queue is bounded
        (transport.peer_queues).
        """
        if self._handoff.reader is _CLOSED:
            raise ConnectionError(f"{self.name}: endpoint is closed")
        if self._outbox or not self._lock.acquire(blocking=False):
            self._outbox.append(frames)
            self._request_flush()
            return
        try:
            watch_writable = self._put(frames)
            readable = self._readable()
        finally:
            self._lock.release()
        self._after_sending(watch_writable, readable)

    def _put(self, frames: list[Buffer]) -> bool:
        """Send or queue one message (lock held), over a direct link when one carries it; True if the socket's
        queue just started, so writability matters."""
        direct = self._direct
        if direct is not None and direct.route(frames):
            return False
        return self._queue_put(frames)

    def _queue_put(self, frames: list[Buffer]) -> bool:
        if self._pending or not self._try_send(frames):
            self._pending.append(frames)
            return len(self._pending) == 1
        return False

    def _readable(self) -> bool:
        """Whether input waits that a reader watching the descriptor would miss (lock held).

        Any use of the socket may consume its (edge-triggered) descriptor's wake-up, so every send checks, and the
        loop or a waiting thread must be told. With neither watching there is nothing to look for: a paused loop
        drains when it resumes, and a thread looks at the socket before it waits (a lookup costs microseconds on
        the call path).
        """
        handoff = self._handoff
        reader = handoff.reader
        if reader is not _LOOP and reader is not _PAUSE_ASKED and not handoff.waiters:
            return False
        return bool(self.socket.getsockopt(_EVENTS) & _POLLIN)

    def _after_sending(self, watch_writable: bool, readable: bool) -> None:
        if watch_writable:
            self._on_loop(self._watch_writable)
        if readable:
            self._handoff.nudge()

    def _request_flush(self) -> None:
        if not self._flush_requested:
            self._flush_requested = True
            self._on_loop(self._flush_outbox)

    def _flush_outbox(self) -> None:
        self._flush_requested = False  # first: a message added from now on asks for another flush
        with self._lock:
            if self._handoff.reader is _CLOSED:
                return
            watch_writable = False
            while self._outbox:
                watch_writable |= self._put(self._outbox.popleft())
            readable = self._readable()
        self._after_sending(watch_writable, readable)

    def _try_send(self, frames: list[Buffer]) -> bool:
        last = len(frames) - 1
        socket = self.socket
        try:
            for index, frame in enumerate(frames):
                size = len(frame) if type(frame) is bytes else memoryview(frame).nbytes
                _send(socket, frame, _NOBLOCK_MORE if index < last else _NOBLOCK, copy=size < OUT_OF_BAND_THRESHOLD)
                self.stats.bytes_out += size
        except zmq.Again:
            if index == 0:
                return False
            raise  # ZeroMQ accepts the rest of a message once its first frame is in
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:  # ROUTER_MANDATORY: the peer is gone
                self.stats.drop("peer_gone")
                return True
            raise
        self.stats.messages_out += 1
        return True

    def _watch_writable(self) -> None:
        with self._lock:
            if self._handoff.reader is _CLOSED:
                return
            if self._peers:
                # A ROUTER's descriptor says nothing about one peer's pipe: look again on a timer.
                if not self._peer_retry_scheduled:
                    self._peer_retry_scheduled = True
                    self._peer_retry_s = _PEER_RETRY_MIN_S
                    self._loop.call_later(self._peer_retry_s, self._retry_blocked)
            elif self._pending:
                self._loop.add_writer(self._zmq_fd, self._flush)

    def _retry_blocked(self) -> None:
        """Send what waits for peers whose pipes were full; those still full are retried later, less often."""
        with self._lock:
            self._peer_retry_scheduled = False
            if self._handoff.reader is _CLOSED:
                return
            moved = self._peers.retry(self.name)
            if self._peers:
                self._peer_retry_s = _PEER_RETRY_MIN_S if moved else min(2 * self._peer_retry_s, _PEER_RETRY_MAX_S)
                self._peer_retry_scheduled = True
                self._loop.call_later(self._peer_retry_s, self._retry_blocked)
        self._handoff.nudge()

    def _flush(self) -> None:
        with self._lock:
            if self._handoff.reader is _CLOSED:
                return
            while self._pending:
                if not self._try_send(self._pending[0]):
                    return
                self._pending.popleft()
            self._loop.remove_writer(self._zmq_fd)
        self._handoff.nudge()

    # ---- receiving -------------------------------------------------------------------------------------------

    def _on_loop(self, fn: Callable[[], None]) -> None:
        if threading.get_ident() == self._loop_thread:
            fn()
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn)

    def _receive_batch(self) -> int:
        """Hand up to ``DRAIN_BATCH`` messages from the socket, then as many from the direct links, to
        ``on_frames``; returns how many. Each gets its own share, so a flood on one never starves the other (a
        batch reaches ``DRAIN_BATCH`` when one of them may have more)."""
        count = self._receive_socket()
        if self._direct is not None:
            with self._receive_lock:  # what one read of the links brought is handled before anyone reads on
                with self._lock:
                    batch = [] if self._handoff.reader is _CLOSED else self._direct.receive(DRAIN_BATCH)
                for frames in batch:
                    self._hand_up(frames)
            count += len(batch)
        return count

    def _has_input(self) -> bool:
        """Whether a message (or part of one) waits (lock held)."""
        direct = self._direct
        return bool(self.socket.getsockopt(_EVENTS) & _POLLIN) or (direct is not None and direct.has_input())

    def _receive_socket(self) -> int:
        socket, handoff = self.socket, self._handoff
        for count in range(DRAIN_BATCH):
            with self._receive_lock:  # receive and handle as one step: messages are handled in arrival order
                with self._lock:
                    if handoff.reader is _CLOSED or not socket.getsockopt(_EVENTS) & _POLLIN:
                        return count
                    frame = socket.recv(_NOBLOCK, copy=False)
                    frames = [frame]
                    while frame.more:  # cheaper than recv_multipart's RCVMORE lookups; the parts are all there
                        frame = socket.recv(_NOBLOCK, copy=False)
                        frames.append(frame)
                self._hand_up(frames)
        return DRAIN_BATCH

    def _hand_up(self, frames: list[Buffer]) -> None:
        self.stats.messages_in += 1
        self.stats.bytes_in += sum(map(len, frames))
        try:
            self._on_frames(frames)
        except Exception:  # a handler bug must not stop the socket
            log.exception("%s: message handler failed", self.name)
            self.stats.drop("handler_error")

    def close(self) -> None:
        """Stop reading and close the socket at once (pending sends are discarded). Call it on the loop."""
        with self._lock:
            if self._handoff.reader is _CLOSED:
                return
            waiters = self._handoff.close()
            if self._loop is not None and not self._loop.is_closed() and self._pending:
                self._loop.remove_writer(self._zmq_fd)
            self._pending.clear()
            if self._peers is not None:
                self._peers.clear()
            self._outbox.clear()
            self._monitor.close(self._loop)
            if self._direct is not None:
                self._direct.close()
                self._sources.close()
            self.socket.close(linger=0)
        if self._on_close is not None:
            self._on_close()
        for waiter in waiters:  # they poll a descriptor that is gone now
            waiter.wake()
