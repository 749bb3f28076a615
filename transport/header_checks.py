"""Type and size checks on single header fields, the pieces of each message's ``parse`` (transport.messages).

A wrong field raises BadHeader with the drop counter's reason: the receiver drops and counts it, never answers.
"""

from __future__ import annotations

from typing import Any

#: Call ids are bytes of 1 to this many bytes (the runtime makes 16).
MAX_CALL_ID_BYTES = 128
#: Ids in one POLL or ACK, or acknowledgements piggybacked on one SUBMIT.
MAX_IDS_PER_MESSAGE = 4096
MAX_METHOD_NAME = 256
MAX_BOOT_ID = 64
MAX_PROOF_BYTES = 64


class BadHeader(ValueError):
    """A header field of the wrong type or size; ``reason`` is the drop counter's label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


_BYTES_ONLY = {bytes}  # the set of types of a list of call ids


def call_id(value: Any) -> bytes:
    if type(value) is not bytes or not 0 < len(value) <= MAX_CALL_ID_BYTES:
        raise BadHeader("bad_call_id", f"a call id must be 1 to {MAX_CALL_ID_BYTES} bytes, got {describe(value)}")
    return value


def call_ids(value: Any) -> list[bytes]:
    if type(value) is list and (
        not value  # the common cases: nothing to acknowledge, or ids as the runtime makes them (checked in C)
        or (
            len(value) <= MAX_IDS_PER_MESSAGE
            and set(map(type, value)) == _BYTES_ONLY
            and 0 < min(map(len, value))
            and max(map(len, value)) <= MAX_CALL_ID_BYTES
        )
    ):
        return value
    if type(value) is not list or len(value) > MAX_IDS_PER_MESSAGE:
        raise BadHeader("bad_header", f"expected a list of at most {MAX_IDS_PER_MESSAGE} call ids")
    return [call_id(item) for item in value]


def boot_id(value: Any) -> str:
    if type(value) is not str or len(value) > MAX_BOOT_ID:
        raise BadHeader("bad_header", f"a boot id must be a str of at most {MAX_BOOT_ID}, got {describe(value)}")
    return value


def nonce(value: Any) -> int | bytes | str | None:
    """A PING's or PONG's nonce: a scalar, of at most MAX_CALL_ID_BYTES if bytes or str."""
    if type(value) not in (int, bytes, str, type(None)):
        raise BadHeader("bad_header", f"a nonce must be an int, bytes, str or None, got {describe(value)}")
    if type(value) in (bytes, str) and len(value) > MAX_CALL_ID_BYTES:
        raise BadHeader("bad_header", f"a nonce has at most {MAX_CALL_ID_BYTES} bytes, got {describe(value)}")
    return value


def optional(value: Any, kind: type, limit: int, field: str) -> Any:
    """``value`` if it is None or a ``kind`` (str or bytes) of at most ``limit``."""
    if value is None or (type(value) is kind and len(value) <= limit):
        return value
    problem = f"{field} must be None or a {kind.__name__} of at most {limit}, got {describe(value)}"
    raise BadHeader("bad_header", problem)


def describe(value: Any) -> str:
    """A field's type (and length) for an error message, never its content."""
    size = f" of length {len(value)}" if isinstance(value, (bytes, str, list)) else ""
    return f"{type(value).__name__}{size}"
