"""Wire constants: the frame layout version, message kinds and size limits, in one place.

A message is a list of ZeroMQ frames: ``[header, *buffers]``. The header frame starts with a 4-byte prefix
``MAGIC (2 bytes) | VERSION (1) | kind (1)`` followed by a msgpack body; buffers are raw out-of-band payloads
(large bytes, numpy arrays, torch tensors) that the body refers to by index.
"""

from __future__ import annotations

import enum

MAGIC = b"MA"
VERSION = 1
PREFIX_LEN = 4

#: Bytes objects and array buffers at least this large travel as separate zero-copy frames.
OUT_OF_BAND_THRESHOLD = 64 * 1024
#: Default ceiling on one message (header plus buffers); larger messages are dropped and counted.
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024**3
#: Default ceiling on one head frame (meta plus inline body).
DEFAULT_MAX_HEADER_BYTES = 64 * 1024**2


class Kind(enum.IntEnum):
    """Message kinds. Client → server: SUBMIT, POLL, ACK, PING. Server → client: RESULT, STATUS, PONG."""

    SUBMIT = 1  # meta: [call_id, method, deadline (unix s or None), expected boot id, validated, acks]
    POLL = 2  # meta: [call_ids]
    ACK = 3  # meta: [call_ids]
    PING = 4  # meta: [nonce]
    RESULT = 11  # meta: [call_id, ok, boot_id]; payload: the value or an error state
    STATUS = 12  # meta: [call_id, state, boot_id]  state: "running" | "unknown" | "acked"
    PONG = 13  # meta: [nonce, boot_id, stats]


CLIENT_KINDS = frozenset({Kind.SUBMIT, Kind.POLL, Kind.ACK, Kind.PING})
SERVER_KINDS = frozenset({Kind.RESULT, Kind.STATUS, Kind.PONG})
