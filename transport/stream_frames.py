"""Multipart messages on a byte stream (a same-host direct link, :mod:`transport.direct_stream`).

A message is ``count (4, little-endian) | size (8) * count | the frames' bytes``.
"""

from __future__ import annotations

import socket
import struct

from transport.codec import Buffer
from transport.protocol import OUT_OF_BAND_THRESHOLD

_COUNT = struct.Struct("<I")
_SIZE = struct.Struct("<Q")
#: Frames smaller than this are copied out of the shared read buffer (many small messages per ``recv``); larger ones
#: are read straight into their own buffer.
COPY_BELOW = OUT_OF_BAND_THRESHOLD
_BUFFER_BYTES = 256 * 1024
#: Compact the read buffer when less than this is free at its end: the largest head or copied frame then fits.
_ROOM = COPY_BELOW + 16 * 1024


class StreamError(ValueError):
    """A peer broke the stream layout or its limits; the link is closed."""


def flat(frame: Buffer) -> memoryview:
    """A frame as a flat byte view (arrays and tensors of any item size)."""
    view = memoryview(frame)
    return view if view.itemsize == 1 and view.ndim == 1 else view.cast("B")


def head(views: list[memoryview]) -> bytes:
    """The count-and-sizes head of a message made of ``views``."""
    return struct.pack(f"<I{len(views)}Q", len(views), *map(len, views))  # flat views: len is nbytes


class StreamReader:
    """Reads whole messages off one non-blocking stream socket, within limits (one reader at a time).

    It bounds what it takes before it allocates anything: at most ``max_frames`` frames (and at least one) and
    ``max_message_bytes`` in all (``first_message_bytes`` for the first message: a hello); a peer that sends more
    is cut off (:class:`StreamError`), never buffered."""

    def __init__(
        self, *, max_frames: int, max_message_bytes: int | None, first_message_bytes: int | None = None
    ) -> None:
        if max_frames < 1:
            raise ValueError(f"max_frames must be at least 1, got {max_frames}")
        self._max_frames = max_frames
        self._max_message_bytes = max_message_bytes
        self._limit = first_message_bytes if first_message_bytes is not None else max_message_bytes  # this message's
        self._buffer = bytearray(_BUFFER_BYTES)
        self._view = memoryview(self._buffer)
        self._start = 0  # first unparsed byte
        self._end = 0  # one past the last byte read
        self._sizes: list[int] = []  # sizes of the frames still to come in the message being read
        self._frames: list[Buffer] = []  # frames of the message being read
        self._big: bytearray | None = None  # a large frame being read in place ...
        self._big_at = 0  # ... and how much of it has come

    def read(self, sock: socket.socket, limit: int) -> tuple[list[list[Buffer]], bool]:
        """The whole messages that have come, and whether the stream is still open (False at its end: the peer
        closed it or reset it). Reads stop once ``limit`` messages are in, but every message already read is
        returned: nothing waits in the buffer that the socket would not announce. Raises :class:`StreamError` on
        a message that breaks the layout."""
        messages: list[list[Buffer]] = []
        while True:
            if self._end > self._start or self._big is not None:  # else nothing is buffered to parse
                self._parse(messages)
            if len(messages) >= limit:
                return messages, True
            try:
                if self._big is not None:
                    room = memoryview(self._big)[self._big_at :]
                    got = sock.recv_into(room)
                    self._big_at += got
                else:
                    self._make_room()
                    room = self._view[self._end :]
                    got = sock.recv_into(room)
                    self._end += got
            except (BlockingIOError, InterruptedError):
                return messages, True
            except (ConnectionResetError, TimeoutError):
                return messages, False
            if got == 0:
                return messages, False
            if got < len(room):  # the socket had no more: what comes later it announces (saves a failing recv)
                self._parse(messages)
                return messages, True

    def _make_room(self) -> None:
        if self._start == self._end:
            self._start = self._end = 0
        elif len(self._buffer) - self._end < _ROOM:
            left = self._end - self._start
            self._buffer[:left] = self._view[self._start : self._end]
            self._start, self._end = 0, left

    def _parse(self, messages: list[list[Buffer]]) -> None:
        """Turn buffered bytes into messages (and frames in progress) while there are enough of them."""
        while True:
            if self._big is not None:
                if self._big_at < len(self._big):
                    return
                self._frames.append(self._big)
                self._big = None
            elif not self._sizes:
                if not self._take_head():
                    return
            elif not self._take_frame():
                return
            if not self._sizes and self._big is None and self._frames:
                messages.append(self._frames)
                self._frames = []
                self._limit = self._max_message_bytes

    def _take_head(self) -> bool:
        available = self._end - self._start
        if available < _COUNT.size:
            return False
        (count,) = _COUNT.unpack_from(self._buffer, self._start)
        if not 1 <= count <= self._max_frames:
            raise StreamError(f"a message of {count} frames (the limit is 1 to {self._max_frames})")
        head_bytes = _COUNT.size + count * _SIZE.size
        if available < head_bytes:
            return False
        sizes = list(struct.unpack_from(f"<{count}Q", self._buffer, self._start + _COUNT.size))
        total = sum(sizes)
        if self._limit is not None and total > self._limit:
            raise StreamError(f"a message of {total} bytes exceeds the limit of {self._limit}")
        self._start += head_bytes
        sizes.reverse()  # popped from the end, first frame first
        self._sizes = sizes
        return True

    def _take_frame(self) -> bool:
        size = self._sizes[-1]
        available = self._end - self._start
        if size < COPY_BELOW:
            if available < size:
                return False
            self._frames.append(bytes(self._view[self._start : self._start + size]))
            self._start += size
        else:
            big = bytearray(size)
            taken = min(size, available)
            big[:taken] = self._view[self._start : self._start + taken]
            self._start += taken
            self._big, self._big_at = big, taken
        self._sizes.pop()
        return True
