"""Same-host direct links beside an endpoint's ZeroMQ socket: a plain Unix stream socket between a caller and an
actor on one host, so a round trip wakes two threads instead of six (ZeroMQ adds both sides' I/O threads, twice each).
Only without CURVE (a CURVE cluster authenticates every peer: it keeps ZeroMQ), and only between one user's processes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import socket
import struct
import threading
from collections.abc import Callable
from typing import Protocol

from transport.codec import Buffer
from transport.direct_stream import DirectStream
from transport.protocol import DEFAULT_MAX_FRAMES
from transport.stream_frames import StreamError

log = logging.getLogger(__name__)

HELLO = b"miles-direct/1"
_MAX_ROUTING_ID = 255  # ZeroMQ's own limit
_MAX_HELLO_BYTES = len(HELLO) + _MAX_ROUTING_ID
_PEERCRED = struct.Struct("3i")  # pid, uid, gid


class Counters(Protocol):
    """What the links count in the endpoint's stats."""

    messages_out: int
    bytes_out: int

    def drop(self, reason: str) -> None: ...


class DirectLinks:
    """The direct links of one endpoint; subclasses say how links begin and what a received message becomes.

    The ZeroMQ connection stays up beside the links: its monitor still reports a link's drops and the peer's death,
    and it carries everything while there is no link.

    Every method runs with the endpoint's lock held; what must happen on the loop (watching a socket for room,
    closing one the loop may still watch) goes through ``on_loop``. The links' descriptors form one epoll set
    (``fd``), which the endpoint watches together with its ZeroMQ socket.
    """

    def __init__(self, *, name: str, max_message_bytes: int | None, max_queued: int | None) -> None:
        self.name = name
        self._stats: Counters | None = None
        self._max_message_bytes = max_message_bytes
        self._max_queued = max_queued
        self._epoll = select.epoll()
        self.fd = self._epoll.fileno()
        self._by_fd: dict[int, DirectStream] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_loop: Callable[[Callable[[], None]], None] = lambda fn: fn()  # not started: nothing to wait for
        self._lock: threading.Lock | None = None

    def start(
        self, loop: asyncio.AbstractEventLoop, on_loop: Callable[[Callable[[], None]], None], lock: threading.Lock,
        stats: Counters,
    ) -> None:  # fmt: skip
        """Begin (on ``loop``); ``lock``: the endpoint's, held around every use; ``stats``: where to count."""
        self._loop, self._on_loop, self._lock, self._stats = loop, on_loop, lock, stats

    def _open(self, sock: socket.socket, first_message_bytes: int | None = None) -> DirectStream:
        stream = DirectStream(
            sock, peer=None, max_frames=DEFAULT_MAX_FRAMES, max_message_bytes=self._max_message_bytes,
            first_message_bytes=first_message_bytes, max_queued=self._max_queued,
        )  # fmt: skip
        self._by_fd[stream.fd] = stream
        self._epoll.register(stream.fd, select.EPOLLIN)
        return stream

    def _drop(self, stream: DirectStream, why: str) -> None:
        """Stop using ``stream``; the loop closes it (it may be watching it for room)."""
        if not stream.open or self._by_fd.get(stream.fd) is not stream:
            return
        log.debug("%s: direct link closed: %s", self.name, why)
        stream.open = False
        del self._by_fd[stream.fd]
        self._epoll.unregister(stream.fd)
        self._forget(stream)
        self._on_loop(lambda: self._close_stream(stream))

    def _forget(self, stream: DirectStream) -> None:
        """A subclass's bookkeeping for a link that closed."""

    def _close_stream(self, stream: DirectStream) -> None:
        if stream.writer_watched and self._loop is not None and not self._loop.is_closed():
            self._loop.remove_writer(stream.fd)
        stream.writer_watched = False
        stream.close()

    # ---- sending ---------------------------------------------------------------------------------------------

    def _write(self, stream: DirectStream, frames: list[Buffer]) -> bool:
        """Send ``frames`` over ``stream``; False if the link broke (the caller then uses ZeroMQ)."""
        try:
            went, size = stream.write(frames)
        except OSError as exc:
            self._drop(stream, f"send failed: {exc}")
            return False
        if went is None:
            self._stats.drop("peer_queue_full")  # it stopped reading: a caller polls for what it missed
            return True
        self._stats.messages_out += 1
        self._stats.bytes_out += size
        if not went and not stream.writer_watched:
            stream.writer_watched = True
            self._on_loop(lambda: self._watch(stream))
        return True

    def _watch(self, stream: DirectStream) -> None:
        if stream.open:
            self._loop.add_writer(stream.fd, self._flush, stream)
        else:
            stream.writer_watched = False

    def _flush(self, stream: DirectStream) -> None:
        with self._lock:
            if not stream.open:
                return
            try:
                done = stream.flush()
            except OSError as exc:
                self._drop(stream, f"send failed: {exc}")
                return
            if done:
                self._loop.remove_writer(stream.fd)
                stream.writer_watched = False

    # ---- receiving -------------------------------------------------------------------------------------------

    def has_input(self) -> bool:
        """Whether some link has bytes (or its end) to read."""
        return bool(self._by_fd) and bool(self._epoll.poll(0))

    def receive(self, limit: int) -> list[list[Buffer]]:
        """The messages that have come over the links (reading stops once ``limit`` are in)."""
        if not self._by_fd:
            return []
        received: list[list[Buffer]] = []
        for fd, _ in self._epoll.poll(0):
            stream = self._by_fd.get(fd)
            if stream is None:
                continue
            try:
                messages, still_open = stream.read(limit - len(received))
                self._take(stream, messages, received)
            except StreamError as exc:
                log.warning("%s: closed a direct link that broke the protocol: %s", self.name, exc)
                self._stats.drop("malformed")
                self._drop(stream, str(exc))
                continue
            if not still_open:
                self._drop(stream, "the peer closed it")
            if len(received) >= limit:
                break
        return received

    def _take(self, stream: DirectStream, messages: list[list[Buffer]], received: list[list[Buffer]]) -> None:
        received.extend(messages)

    def close(self) -> None:
        """Close every link (on the loop)."""
        for stream in list(self._by_fd.values()):
            self._drop(stream, "the endpoint closed")
        self._epoll.close()


class DirectListener(DirectLinks):
    """An actor's side: accepts links from this host's callers (same user only, ``max_links`` at once, and only
    while ``has_room()``: the socket's own connection limit) and answers each routing id over its link.

    An actor with a same-host twin (transport.local_twin) listens on ``@miles-direct-HOST:PORT``. A caller's first
    message (the hello) says which ZeroMQ routing id it is; a routing id without a link is answered over ZeroMQ.
    """

    def __init__(
        self, listener: socket.socket, *, max_links: int, has_room: Callable[[], bool] = lambda: True, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self._listener = listener
        self._listener_fd = listener.fileno()
        self._max_links = max_links
        self._has_room = has_room
        self._by_peer: dict[bytes, DirectStream] = {}
        self._uid = os.getuid()

    @classmethod
    def bind(cls, name: str, **kwargs) -> DirectListener:
        """Listen on the abstract socket ``name``; OSError if it is taken."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind("\0" + name)
            listener.listen(1024)
        except OSError:
            listener.close()
            raise
        listener.setblocking(False)
        return cls(listener, name=f"direct {name}", **kwargs)

    def start(self, loop: asyncio.AbstractEventLoop, *args) -> None:
        super().start(loop, *args)
        loop.add_reader(self._listener_fd, self._accept)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors: the caller keeps using ZeroMQ
                log.warning("%s: cannot accept a direct link: %s", self.name, exc)
                return
            _, uid, _ = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
            with self._lock:
                if uid != self._uid or len(self._by_fd) >= self._max_links or not self._has_room():
                    self._stats.drop("direct_refused")
                    sock.close()
                    continue
                self._open(sock, first_message_bytes=_MAX_HELLO_BYTES)  # nothing larger than a hello comes first

    def route(self, frames: list[Buffer]) -> bool:
        """Send ``[peer, *frames]`` over the peer's link if it has one; whether it was taken."""
        if not self._by_peer:
            return False
        peer = frames[0]
        stream = self._by_peer.get(peer if type(peer) is bytes else bytes(peer))
        return stream is not None and self._write(stream, frames[1:])

    def _take(self, stream: DirectStream, messages: list[list[Buffer]], received: list[list[Buffer]]) -> None:
        if stream.peer is None and messages:
            hello = messages.pop(0)
            if len(hello) != 2 or hello[0] != HELLO or not 1 <= len(hello[1]) <= _MAX_ROUTING_ID:
                raise StreamError("the first message is not a hello with a routing id")
            stream.peer = peer = bytes(hello[1])
            old = self._by_peer.get(peer)
            if old is not None:  # the same caller again (its old link not yet seen closed): the new one wins
                self._drop(old, "replaced by a new link of the same peer")
            self._by_peer[peer] = stream
        peer = stream.peer
        received.extend([peer, *message] for message in messages)

    def _forget(self, stream: DirectStream) -> None:
        if stream.peer is not None and self._by_peer.get(stream.peer) is stream:
            del self._by_peer[stream.peer]

    def close(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._listener_fd)
        self._listener.close()
        super().close()


class DirectConnector(DirectLinks):
    """A caller's side: one link to the actor listening on ``name``; while there is none, ``route`` declines and
    ZeroMQ carries the messages.

    Messages keep their order because the caller never moves from ZeroMQ to a link: a message sent over ZeroMQ
    may still be on its way (waiting for ZeroMQ to connect, or in its I/O threads) when a later one would arrive
    over the link. So the link is tried when the endpoint starts and, after it broke (the actor restarted), once
    more at the next send; from the first message that ZeroMQ carries on, ZeroMQ carries every one. Moving from a
    link to ZeroMQ is safe: what the broken link still held went to an actor that closed it."""

    def __init__(self, name: str, routing_id: bytes, **kwargs) -> None:
        super().__init__(name=f"direct {name}", **kwargs)
        self._target = "\0" + name
        self._routing_id = routing_id
        self._stream: DirectStream | None = None
        self._zmq_used = False  # ZeroMQ carried a message: no link from now on

    def start(self, loop: asyncio.AbstractEventLoop, *args) -> None:
        super().start(loop, *args)
        self._connect()

    @property
    def connected(self) -> bool:
        return self._stream is not None

    def _connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
        try:
            sock.connect(self._target)
        except OSError as exc:  # nothing listens (yet, or any more), or its backlog is full: ZeroMQ
            log.debug("%s: no direct link (%s); ZeroMQ carries the messages", self.name, exc)
            sock.close()
            return
        stream = self._open(sock)
        if self._write(stream, [HELLO, self._routing_id]) and stream.open:
            self._stream = stream

    def route(self, frames: list[Buffer]) -> bool:
        """Send ``frames`` over the link if there is one (connecting again if it broke and ZeroMQ has carried
        nothing since); False: ZeroMQ must carry them, and every later message."""
        for _ in range(2):  # a link found broken on this send is connected again at once
            if self._stream is None:
                if self._zmq_used:
                    return False
                self._connect()
                if self._stream is None:
                    break
            if self._write(self._stream, frames):
                return True
        self._zmq_used = True
        return False

    def _forget(self, stream: DirectStream) -> None:
        if self._stream is stream:
            self._stream = None
