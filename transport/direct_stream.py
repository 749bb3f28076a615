"""One same-host direct link: a non-blocking Unix stream socket that carries multipart messages both ways.

The owner serialises every use (the endpoint's lock).
"""

from __future__ import annotations

import collections
import os
import socket

from transport.codec import Buffer
from transport.stream_frames import StreamReader, flat, head

_FLAGS = socket.MSG_NOSIGNAL  # a closed link is an OSError, never a SIGPIPE
_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)


class DirectStream:
    """A connected stream socket; ``peer``: the routing id its far end introduced itself with (None until then).

    ``max_queued``: the most messages that may wait for room (None: no bound); past it ``write`` drops.
    ``first_message_bytes``: the bound of the first message read (a hello), ``max_message_bytes`` of the rest."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        peer: bytes | None,
        max_frames: int,
        max_message_bytes: int | None,
        first_message_bytes: int | None = None,
        max_queued: int | None,
    ) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.reader = StreamReader(
            max_frames=max_frames, max_message_bytes=max_message_bytes, first_message_bytes=first_message_bytes
        )
        self.open = True
        self.writer_watched = False  # the loop watches the socket for room
        self._max_queued = max_queued
        self._out: collections.deque[tuple[memoryview, bool]] = collections.deque()  # parts waiting; ends a message
        self._queued = 0  # messages with parts waiting

    @property
    def backlogged(self) -> bool:
        """Whether parts wait for room in the socket."""
        return bool(self._out)

    def write(self, frames: list[Buffer]) -> tuple[bool | None, int]:
        """Send one message: (True if it all went now, False if some of it waits for room, None if it was dropped
        because ``max_queued`` messages wait already; bytes in the message). Raises OSError on a broken link.

        It goes out on the calling thread with one ``sendmsg`` (the head and every frame gathered, nothing copied);
        what the socket cannot take at once waits in order, as views of the caller's buffers, for :meth:`flush`."""
        views = [flat(frame) for frame in frames]
        parts = [memoryview(head(views)), *views]
        size = sum(map(len, parts))  # flat views: len is nbytes
        if self._out:
            if self._max_queued is not None and self._queued >= self._max_queued:
                return None, size
            self._queue(parts, 0)
            return False, size
        try:
            sent = self.sock.sendmsg(parts[:_IOV_MAX], (), _FLAGS)
        except (BlockingIOError, InterruptedError):
            sent = 0
        if sent == size:
            return True, size
        self._queue(parts, sent)
        return False, size

    def _queue(self, parts: list[memoryview], sent: int) -> None:
        out = self._out
        out.extend((part, False) for part in parts[:-1])
        out.append((parts[-1], True))
        self._queued += 1
        self._consume(sent)

    def _consume(self, sent: int) -> None:
        """Forget the first ``sent`` bytes waiting (and empty parts at the front)."""
        out = self._out
        while out:
            part, ends = out[0]
            if part.nbytes > sent:
                out[0] = (part[sent:], ends)
                return
            sent -= part.nbytes
            out.popleft()
            if ends:
                self._queued -= 1

    def flush(self) -> bool:
        """Send what waits, as far as the socket takes it (the owner calls it when the socket is writable); whether
        nothing waits any more. Raises OSError on a broken link."""
        out = self._out
        while out:
            batch = [part for part, _ in (out[i] for i in range(min(len(out), _IOV_MAX)))]
            try:
                sent = self.sock.sendmsg(batch, (), _FLAGS)
            except (BlockingIOError, InterruptedError):
                return False
            self._consume(sent)
        return True

    def read(self, limit: int) -> tuple[list[list[Buffer]], bool]:
        """Whole messages that have come (at most ``limit``, through the StreamReader) and whether the link is still
        open."""
        return self.reader.read(self.sock, limit)

    def close(self) -> None:
        self.open = False
        self._out.clear()
        self.sock.close()
