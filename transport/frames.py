"""The versioned frame layout: ``[head, *buffers]``, one ZeroMQ frame for most messages.

Meta travels apart from the body, so a server routes, dedupes and fingerprints a call without decoding its arguments.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import msgpack

from transport.codec import Buffer
from transport.protocol import (
    DEFAULT_MAX_FRAMES,
    MAGIC,
    META_MAX_BYTES,
    META_MAX_ITEMS,
    PREFIX_LEN,
    VERSION,
    Kind,
)

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


def pack(
    kind: Kind, meta: list[Any] | tuple[Any, ...], payload: tuple[bytes, list[Buffer]] | None = None
) -> list[Buffer]:
    """Frames for one message; ``meta`` is a message of transport.messages (or, in tests, any list), ``payload``
    is ``codec.encode``'s result.

    The head frame is ``MAGIC (2) | VERSION (1) | kind (1) | meta length (4, little-endian) | meta | body``: meta is
    a small msgpack list (ids, flags) and body, when present, is a codec body (arguments or a result). The frames
    after the head are that body's out-of-band buffers. A small message is one frame: one ZeroMQ send.
    """
    packed_meta = msgpack.packb(meta, use_bin_type=True)
    head = _PREFIXES[kind] + _META_LEN.pack(len(packed_meta)) + packed_meta
    if payload is None:
        return [head]
    body, buffers = payload
    return [head + body, *buffers]


def _refuse_extension(code: int, data: bytes) -> Any:
    raise ValueError(f"meta holds a msgpack extension (code {code})")


def unpack(frames: list[Buffer], *, max_header_bytes: int, max_frames: int = DEFAULT_MAX_FRAMES) -> Message:
    """Parse frames (bytes or zmq.Frame); raises FrameError on anything malformed.

    Bounded: at most ``max_frames`` frames and ``max_header_bytes`` of head, and a meta list of scalars and short
    lists or maps (``META_MAX_ITEMS``, ``META_MAX_BYTES``, no extension types). The receiver then checks every
    field's exact type and size (each message's ``parse``, transport.messages), so nothing deeper gets by.
    """
    if not frames:
        raise FrameError("empty message")
    if len(frames) > max_frames:
        raise FrameError(f"a message of {len(frames)} frames exceeds the limit of {max_frames}")
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
    kind = _KINDS.get(head[3])
    if kind is None:
        raise FrameError(f"unknown message kind {head[3]}")
    try:  # no extension types; lengths bounded by the meta's own bytes (msgpack's default), items and strings below
        meta = msgpack.unpackb(
            head[_HEAD_FIXED:body_start],
            raw=False,
            strict_map_key=False,
            ext_hook=_refuse_extension,
            max_str_len=META_MAX_BYTES,
            max_bin_len=META_MAX_BYTES,
            max_array_len=META_MAX_ITEMS,
            max_map_len=META_MAX_ITEMS,
        )
    except msgpack.StackError:  # msgpack's own bound on nesting (1024 levels)
        raise FrameError("meta nests too deep") from None
    except (ValueError, TypeError, msgpack.UnpackException) as exc:  # TypeError: a list or map as a map key
        raise FrameError(f"malformed meta: {type(exc).__name__}: {exc}") from exc
    if type(meta) is not list:
        raise FrameError("meta is not a list")
    body = memoryview(head)[body_start:] if body_start < len(head) else None
    return Message(kind, meta, body, list(frames[1:]))
