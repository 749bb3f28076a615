"""Encoding of a call's outcome (value or error) into RESULT frames, and back into a value or exception."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

from runtime.call_store import CallRecord
from runtime.errors import ERROR_CODES, ActorError, CallSite, RemoteError, remote_error
from transport import frames as wire
from transport import sealed_pickle, shared_memory
from transport.codec import Buffer, DecodeError, decode, encode, encode_shared
from transport.protocol import Kind

log = logging.getLogger(__name__)

_MAX_EXCEPTION_BYTES = 1 << 20  # an exception carrying more travels as its description only


def arguments_bind(call_id: bytes) -> bytes:
    """What a sealed pickle among a call's arguments is bound to: that call, that direction (transport.sealed_pickle
    ``mac``), so it is refused as another call's argument or as a result."""
    return b"arguments\0" + call_id


def result_bind(call_id: bytes) -> bytes:
    """What a sealed pickle in a call's result is bound to (see :func:`arguments_bind`)."""
    return b"result\0" + call_id


def error_state(code: str, exc: BaseException | None = None, message: str = "") -> dict[str, Any]:
    """The wire form of an error: a code from ERROR_CODES, the exception type, message and traceback."""
    if exc is None:
        return {"code": code, "type": "", "message": message, "traceback": ""}
    state = {
        "code": code,
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": message or str(exc),
        "traceback": "".join(traceback.format_exception(exc)) if code == "remote" else "",
    }
    if code == "remote":
        sealed = _sealed_exception(exc)
        if sealed is not None:
            state["exception"] = sealed
    return state


def _sealed_exception(exc: BaseException) -> bytes | None:
    """The exception itself as an encoded sealed pickle (kept as bytes, so that a caller that cannot load it still
    reads the rest of the state), or None when it cannot travel so: pickles off or no secret, unpicklable, large."""
    if sealed_pickle.unavailable() is not None:
        return None
    try:
        body, buffers = encode(exc, threshold=_MAX_EXCEPTION_BYTES)
    except Exception:
        return None
    return body if not buffers and len(body) <= _MAX_EXCEPTION_BYTES else None


def _cause(sealed: Any) -> Any:
    """The remote exception from its sealed bytes, or None when it does not load here (its class's module missing,
    another session's secret...): the error is then built from its description alone, as without it."""
    if type(sealed) is not bytes:
        return None
    try:
        return decode(sealed)
    except DecodeError as exc:
        log.debug("the remote exception did not load here (%s); raising it from its description", exc)
        return None


def result_frames(record: CallRecord, boot_id: str, value: Any) -> list[Buffer]:
    """RESULT frames for a call's value; large buffers go through shared memory when the caller allows it.

    A value that cannot be encoded, whatever the reason (an unsupported type, an int over 64 bits, nesting
    too deep), becomes an error result naming the method, the value's type and the problem.
    """
    try:
        if record.shm_ok:
            payload, record.shared = encode_shared(value, bind=result_bind(record.call_id))
        else:
            payload = encode(value, bind=result_bind(record.call_id))
        return wire.pack(Kind.RESULT, [record.call_id, True, boot_id], payload)
    except Exception as exc:
        if record.shared:
            shared_memory.unlink(record.shared)
            record.shared = []
        message = (
            f"method {record.method!r} returned a value that cannot be sent: a {_type_name(value)} "
            f"({_type_name(exc)}: {_text(exc)})"
        )
        kind = f"{type(exc).__module__}.{type(exc).__qualname__}"  # as error_state names it
        state = {"code": "remote", "type": kind, "message": message, "traceback": ""}
        return wire.pack(Kind.RESULT, [record.call_id, False, boot_id], _encode_error(state))


def error_frames(
    call_id: bytes, boot_id: str, code: str, message: str = "", exc: BaseException | None = None
) -> list[Buffer]:
    """RESULT frames for an error with a code from ERROR_CODES."""
    try:
        state = error_state(code, exc, message)
    except Exception as problem:  # e.g. an exception whose str() raises: the call is answered all the same
        state = error_state(code, None, f"{message or _type_name(exc)} (details lost: {_type_name(problem)})")
    return wire.pack(Kind.RESULT, [call_id, False, boot_id], _encode_error(state))


def _encode_error(state: dict[str, Any]) -> tuple[bytes, list[Buffer]]:
    try:
        return encode(state)
    except Exception:  # text msgpack cannot carry (lone surrogates): send what it can
        text = {key: value for key, value in state.items() if key != "exception"}
        safe = {key: value.encode("utf-8", "replace").decode("utf-8") for key, value in text.items()}
        return encode(safe)


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return "(its message could not be read)"


def _type_name(obj: object) -> str:
    cls = type(obj)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def to_exception(state: Any, site: CallSite) -> ActorError:
    """The exception a caller sees for an error state."""
    if not isinstance(state, dict):
        return RemoteError(f"malformed error from the actor: {state!r}", site=site)
    cls = ERROR_CODES.get(state.get("code", ""), RemoteError)
    message = str(state.get("message", ""))
    if cls is RemoteError:
        return remote_error(
            message,
            site=site,
            remote_type=str(state.get("type", "")),
            remote_traceback=str(state.get("traceback", "")),
            cause=_cause(state.get("exception")),
        )
    return cls(message, site=site)


def decode_result(
    ok: bool, body: Buffer | None, buffers: list[Buffer], site: Callable[[], CallSite], call_id: bytes
) -> tuple[bool, Any]:
    """(True, value) or (False, exception) for a RESULT's payload of call ``call_id``; ``site()`` names the call in
    an exception (made only then: most results are values)."""
    value = decode(body, buffers, bind=result_bind(call_id)) if body is not None else None
    return (True, value) if ok else (False, to_exception(value, site()))
