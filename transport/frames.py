"""The versioned frame layout: ``[head, *buffers]``, one ZeroMQ frame for most messages.

The head frame is ``MAGIC (2) | VERSION (1) | kind (1) | meta length (4, little-endian) | meta | body``: meta is
a small msgpack list (ids, flags) and body, when present, is a codec body (arguments or a result). The frames
after the head are that body's out-of-band buffers. Keeping meta apart from the body lets a server route,
dedupe and fingerprint a call without decoding its arguments; keeping small messages in one frame keeps each
send to a single ZeroMQ operation.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import msgpack

from transport.codec import Buffer
from transport.protocol import MAGIC, PREFIX_LEN, VERSION, Kind

_PREFIXES = {kind: MAGIC + bytes([VERSION, kind]) for kind in Kind}
_KINDS = {int(kind): kind for kind in Kind}
_META_LEN = struct.Struct("<I")
_HEAD_FIXED = PREFIX_LEN + _META_LEN.size


class FrameError(ValueError):
    """A message that does not follow the frame layout; the receiver drops and counts it."""


@dataclass(slots=True)
class Message:
    """A parsed message: its kind, metadata list, and optional payload body with buffers."""

    kind: Kind
    meta: list[Any]
    body: Buffer | None
    buffers: list[Buffer]


def pack(kind: Kind, meta: list[Any], payload: tuple[bytes, list[Buffer]] | None = None) -> list[Buffer]:
    """Frames for one message; ``payload`` is ``codec.encode``'s result."""
    packed_meta = msgpack.packb(meta, use_bin_type=True)
    head = _PREFIXES[kind] + _META_LEN.pack(len(packed_meta)) + packed_meta
    if payload is None:
        return [head]
    body, buffers = payload
    return [head + body, *buffers]


def unpack(frames: list[Buffer], *, max_header_bytes: int) -> Message:
    """Parse frames (bytes or zmq.Frame); raises FrameError on anything malformed."""
    if not frames:
        raise FrameError("empty message")
    head = frames[0]
    head = head.bytes if hasattr(head, "bytes") else bytes(head)
    if len(head) < _HEAD_FIXED or head[:2] != MAGIC:
        raise FrameError("frame 0 does not start with the protocol magic")
    if head[2] != VERSION:
        raise FrameError(f"frame layout version {head[2]} is not supported (this side speaks {VERSION})")
    if len(head) > max_header_bytes:
        raise FrameError(f"head frame of {len(head)} bytes exceeds the limit of {max_header_bytes}")
    (meta_len,) = _META_LEN.unpack_from(head, PREFIX_LEN)
    body_start = _HEAD_FIXED + meta_len
    if body_start > len(head):
        raise FrameError(f"meta length {meta_len} runs past the head frame ({len(head)} bytes)")
    try:
        kind = _KINDS[head[3]]
        meta = msgpack.unpackb(head[_HEAD_FIXED:body_start], raw=False, use_list=True, strict_map_key=False)
    except KeyError:
        raise FrameError(f"unknown message kind {head[3]}") from None
    except (ValueError, msgpack.UnpackException) as exc:
        raise FrameError(f"malformed meta: {exc}") from exc
    if type(meta) is not list:
        raise FrameError("meta is not a list")
    body = memoryview(head)[body_start:] if body_start < len(head) else None
    return Message(kind, meta, body, list(frames[1:]))
