"""Type and size checks on the header (meta) fields of every client message, before anything is allocated.

A message whose fields are not exactly of the expected types and sizes is dropped and counted under the reason
these checks give (``bad_call_id``, ``bad_header``): a peer sending it is broken or hostile, and an answer would
only help it probe. The limits here are far above what the runtime itself ever sends. A SUBMIT's header has a type
of its own, with its pack and its parse (:mod:`transport.submit_header`); the other kinds' headers are checked here.
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


def ids_only(meta: list[Any]) -> list[bytes]:
    """The call ids of a POLL or ACK: ``[call_ids]``."""
    if len(meta) != 1:
        raise BadHeader("bad_header", f"a POLL/ACK header has 1 field, got {len(meta)}")
    return call_ids(meta[0])


def reply(meta: list[Any], second: type) -> tuple[bytes, Any, str]:
    """The fields of a RESULT ``[call_id, ok: bool, boot_id]`` or STATUS ``[call_id, state: str, boot_id]``."""
    if len(meta) != 3:
        raise BadHeader("bad_header", f"a reply header has 3 fields, got {len(meta)}")
    cid, value, boot_id = meta
    if (  # the common case in one expression; the checks below say what is wrong
        type(cid) is bytes
        and 0 < len(cid) <= MAX_CALL_ID_BYTES
        and type(value) is second
        and type(boot_id) is str
        and len(boot_id) <= MAX_BOOT_ID
        and (second is bool or len(value) <= MAX_METHOD_NAME)
    ):
        return cid, value, boot_id
    if type(value) is not second or (second is str and len(value) > MAX_METHOD_NAME):
        raise BadHeader("bad_header", f"a reply's second field must be a {second.__name__}, got {describe(value)}")
    if type(boot_id) is not str or len(boot_id) > MAX_BOOT_ID:
        raise BadHeader("bad_header", f"a boot id must be a str of at most {MAX_BOOT_ID}, got {describe(boot_id)}")
    return call_id(cid), value, boot_id


def ping_nonce(meta: list[Any]) -> Any:
    if len(meta) != 1 or type(meta[0]) not in (int, bytes, str, type(None)):
        raise BadHeader("bad_header", "a PING header is [nonce] with a scalar nonce")
    if type(meta[0]) in (bytes, str) and len(meta[0]) > MAX_CALL_ID_BYTES:
        raise BadHeader("bad_header", f"a PING nonce has at most {MAX_CALL_ID_BYTES} bytes")
    return meta[0]


def describe(value: Any) -> str:
    """A field's type (and length) for an error message, never its content."""
    size = f" of length {len(value)}" if isinstance(value, (bytes, str, list)) else ""
    return f"{type(value).__name__}{size}"
