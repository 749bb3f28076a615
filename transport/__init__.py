"""Bytes on the wire: the msgpack codec with zero-copy buffers, the frame layout and ZeroMQ endpoints.

This layer knows nothing of actors; its public surface is listed below.
"""

# - encode / decode: objects <-> (msgpack body, out-of-band buffers)
# - register_type: allow a dataclass, pydantic model, enum (or a class with custom state) on the wire
# - transport.frames: ``pack``/``unpack`` of the versioned frame layout
# - transport.messages: one type per message kind (``Submit``, ``Result``, ...) with its ``pack`` and ``parse``
# - transport.endpoints: sockets driven by an asyncio loop; ``send`` works from any thread, and a thread may
#   ``receive_here`` while it waits for a reply
# - transport.sockets: ``router``/``dealer``, the sockets behind endpoints, optionally with CURVE
# - transport.waker: the per-thread descriptor that wakes a thread waiting in ``receive_here``
# - transport.security: cluster CURVE keys (``generate_cluster_keys``, ``load_curve_keys``) and the ZAP handler

from transport.codec import DecodeError, UnsupportedTypeError, decode, encode
from transport.frames import FrameError, Message
from transport.protocol import VERSION, Kind
from transport.type_registry import register_type

__all__ = [
    "VERSION",
    "DecodeError",
    "FrameError",
    "Kind",
    "Message",
    "UnsupportedTypeError",
    "decode",
    "encode",
    "register_type",
]
