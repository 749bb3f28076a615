"""Encoding of a call's outcome (value or error) into RESULT frames, and back into a value or exception."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any, Protocol

from runtime.core.errors import ERROR_CODES, ActorError, CallSite, RemoteError, remote_error
from transport import shared_memory
from transport.codec import Buffer, decode, encode, encode_shared
from transport.messages import Result


class CallRecord(Protocol):
    """What a reply needs of the actor's record of a call (runtime.actor.call_store's CallRecord is one)."""

    call_id: bytes
    method: str
    shm_ok: bool
    shared: list[str]


def arguments_bind(call_id: bytes) -> bytes:
    """What a sealed pickle among a call's arguments is bound to: that call, that direction (transport.sealed_pickle
    ``mac``), so it is refused as another call's argument or as a result."""
    return b"arguments\0" + call_id


def result_bind(call_id: bytes) -> bytes:
    """What a sealed pickle in a call's value is bound to (see :func:`arguments_bind`); an error state's (the
    exception's attributes) is bound to the session only."""
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
    attributes = {k: v for k, v in vars(exc).items() if isinstance(k, str) and not k.startswith("__")}
    if code == "remote" and attributes:  # the exception's own fields (e.code): dropped if they cannot travel
        state["attributes"] = attributes
    return state


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
        return Result(record.call_id, True, boot_id).pack(payload)
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
        return Result(record.call_id, False, boot_id).pack(_encode_error(state))


def error_frames(
    call_id: bytes, boot_id: str, code: str, message: str = "", exc: BaseException | None = None
) -> list[Buffer]:
    """RESULT frames for an error with a code from ERROR_CODES."""
    try:
        state = error_state(code, exc, message)
    except Exception as problem:  # e.g. an exception whose str() raises: the call is answered all the same
        state = error_state(code, None, f"{message or _type_name(exc)} (details lost: {_type_name(problem)})")
    return Result(call_id, False, boot_id).pack(_encode_error(state))


def _encode_error(state: dict[str, Any]) -> tuple[bytes, list[Buffer]]:
    try:
        return encode(state)
    except Exception:  # attributes that cannot travel, text msgpack cannot carry (lone surrogates): what it can
        safe = {k: v.encode("utf-8", "replace").decode("utf-8") for k, v in state.items() if isinstance(v, str)}
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
        error = remote_error(
            message,
            site=site,
            remote_type=str(state.get("type", "")),
            remote_traceback=str(state.get("traceback", "")),
        )
        attributes = state.get("attributes")
        if isinstance(attributes, dict):  # the remote exception's fields, where they do not hide the error's own
            vars(error).update({k: v for k, v in attributes.items() if isinstance(k, str) and k not in vars(error)})
        return error
    return cls(message, site=site)


def decode_result(
    ok: bool, body: Buffer | None, buffers: list[Buffer], site: Callable[[], CallSite], call_id: bytes
) -> tuple[bool, Any]:
    """(True, value) or (False, exception) for a RESULT's payload of call ``call_id``; ``site()`` names the call in
    an exception (made only then: most results are values)."""
    bind = result_bind(call_id) if ok else b""
    value = decode(body, buffers, bind=bind) if body is not None else None
    return (True, value) if ok else (False, to_exception(value, site()))
