"""Wire constants: the frame layout version, message kinds and size limits, in one place.

Every peer is untrusted: the limits below bound what a receiver parses and builds from a message.
"""

from __future__ import annotations

import enum

# A message is a list of ZeroMQ frames: ``[head, *buffers]``. The head frame starts with a 4-byte prefix
# ``MAGIC (2 bytes) | VERSION (1) | kind (1)`` followed by msgpack meta and body (transport.frames); buffers are raw
# out-of-band payloads (large bytes, numpy arrays, torch tensors) that the body refers to by index.
MAGIC = b"MA"
VERSION = 1
PREFIX_LEN = 4

#: Bytes objects and array buffers at least this large travel as separate zero-copy frames.
OUT_OF_BAND_THRESHOLD = 64 * 1024
#: Default ceiling on one message (header plus buffers); larger messages are dropped and counted.
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024**3
#: Default ceiling on one head frame (meta plus inline body).
DEFAULT_MAX_HEADER_BYTES = 64 * 1024**2
#: Default ceiling on frames in one message (the head and its out-of-band buffers); the encoder never makes more.
DEFAULT_MAX_FRAMES = 1024

#: How deep lists, maps, tuples and registered objects may nest in a decoded body.
MAX_DEPTH = 64
#: How deep msgpack extensions (tuples, arrays, tensors, registered objects) may nest: msgpack's C unpacker
#: takes about 40 KiB of stack per level, so a decode needs less than 768 KiB (a thread has 8 MiB by default).
MAX_EXT_DEPTH = 16
#: The most dimensions an array or tensor may have.
MAX_RANK = 32

#: Meta, the small list that routes a message, holds ids, flags and short names: its lists and maps hold at most
#: this many items (transport.header_checks.MAX_IDS_PER_MESSAGE fits),
META_MAX_ITEMS = 4096
#: and its strings and bytes are at most this long.
META_MAX_BYTES = 1024


class Kind(enum.IntEnum):
    """Message kinds. Client → server: SUBMIT, POLL, ACK, PING. Server → client: RESULT, STATUS, PONG.

    Each kind's meta is a type of :mod:`transport.messages` (``MESSAGES``), with its pack and its parse.
    """

    SUBMIT = 1  # messages.Submit; body: the arguments
    POLL = 2  # messages.Poll
    ACK = 3  # messages.Ack
    PING = 4  # messages.Ping
    RESULT = 11  # messages.Result; body: the value or an error state
    STATUS = 12  # messages.Status
    PONG = 13  # messages.Pong


CLIENT_KINDS = frozenset({Kind.SUBMIT, Kind.POLL, Kind.ACK, Kind.PING})
SERVER_KINDS = frozenset({Kind.RESULT, Kind.STATUS, Kind.PONG})
