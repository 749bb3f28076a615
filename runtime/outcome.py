"""Encoding of a call's outcome (value or error) into RESULT frames, and back into a value or exception."""

from __future__ import annotations

import traceback
from typing import Any

from runtime.call_store import CallRecord
from runtime.errors import ERROR_CODES, ActorError, CallSite, RemoteError
from transport import frames as wire
from transport.codec import Buffer, UnsupportedTypeError, decode, encode, encode_shared
from transport.protocol import Kind


def error_state(code: str, exc: BaseException | None = None, message: str = "") -> dict[str, Any]:
    """The wire form of an error: a code from ERROR_CODES, the exception type, message and traceback."""
    if exc is None:
        return {"code": code, "type": "", "message": message, "traceback": ""}
    return {
        "code": code,
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": message or str(exc),
        "traceback": "".join(traceback.format_exception(exc)) if code == "remote" else "",
    }


def result_frames(record: CallRecord, boot_id: str, value: Any) -> list[Buffer]:
    """RESULT frames for a call's value; large buffers go through shared memory when the caller allows it.

    A value that cannot be encoded becomes an error result naming the problem.
    """
    ok = True
    try:
        if record.shm_ok:
            payload, record.shared = encode_shared(value)
        else:
            payload = encode(value)
    except UnsupportedTypeError as exc:
        ok = False
        payload = encode(error_state("remote", exc, f"the method returned a value that cannot be sent: {exc}"))
    return wire.pack(Kind.RESULT, [record.call_id, ok, boot_id], payload)


def error_frames(
    call_id: bytes, boot_id: str, code: str, message: str = "", exc: BaseException | None = None
) -> list[Buffer]:
    """RESULT frames for an error with a code from ERROR_CODES."""
    return wire.pack(Kind.RESULT, [call_id, False, boot_id], encode(error_state(code, exc, message)))


def to_exception(state: Any, site: CallSite) -> ActorError:
    """The exception a caller sees for an error state."""
    if not isinstance(state, dict):
        return RemoteError(f"malformed error from the actor: {state!r}", site=site)
    cls = ERROR_CODES.get(state.get("code", ""), RemoteError)
    message = str(state.get("message", ""))
    if cls is RemoteError:
        return RemoteError(
            message,
            site=site,
            remote_type=str(state.get("type", "")),
            remote_traceback=str(state.get("traceback", "")),
        )
    return cls(message, site=site)


def decode_result(ok: bool, body: Buffer | None, buffers: list[Buffer], site: CallSite) -> tuple[bool, Any]:
    """(True, value) or (False, exception) for a RESULT's payload."""
    value = decode(body, buffers) if body is not None else None
    return (True, value) if ok else (False, to_exception(value, site))
