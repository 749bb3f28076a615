"""Every wire message: one type per kind with its ``pack`` and its ``parse`` side by side, and a SUBMIT's fingerprint.

A type packs as the msgpack array of its fields; ``parse`` checks each field's type and size, raising BadHeader.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, NamedTuple

from transport import frames as wire
from transport.codec import Buffer
from transport.header_checks import (
    MAX_BOOT_ID,
    MAX_CALL_ID_BYTES,
    MAX_METHOD_NAME,
    MAX_PROOF_BYTES,
    BadHeader,
    boot_id,
    call_id,
    call_ids,
    describe,
    nonce,
    optional,
)
from transport.protocol import Kind

Payload = tuple[bytes, list[Buffer]]  # codec.encode's result: the body and its out-of-band buffers

_pack = wire.pack
_new = tuple.__new__  # a message from a meta list already checked field by field (no copy made in Python)
_SUBMIT, _POLL, _ACK, _PING = Kind.SUBMIT, Kind.POLL, Kind.ACK, Kind.PING
_RESULT, _STATUS, _PONG = Kind.RESULT, Kind.STATUS, Kind.PONG

#: What a STATUS says of a call: it runs (its RESULT will come), the server never saw it (resend it), or its
#: result is gone (acknowledged, or expired unacknowledged).
CALL_STATES = frozenset({"running", "unknown", "acked", "expired"})


class Submit(NamedTuple):
    """Client → server: start a call; the payload is the encoded ``[args, kwargs]``.

    ``expected_boot``: the incarnation the call is meant for (None: any); ``proof``: a control call's
    (runtime.core.control_auth); ``acks``: results received since the last message; ``shm_ok``: the caller shares this
    machine's /dev/shm, so large results may come back through shared memory.
    """

    call_id: bytes
    method: str  # may be name@group (runtime.core.metadata)
    deadline: float | None  # unix seconds
    expected_boot: str | None
    proof: bytes | None
    acks: list[bytes]
    shm_ok: bool

    def pack(self, payload: Payload) -> list[Buffer]:
        return _pack(_SUBMIT, self, payload)

    @staticmethod
    def parse(meta: list[Any]) -> Submit:
        if (  # the common case in one expression (an ordinary call); the checks below say what is wrong
            len(meta) == 7
            and type(meta[0]) is bytes
            and 0 < len(meta[0]) <= MAX_CALL_ID_BYTES
            and type(meta[1]) is str
            and 0 < len(meta[1]) <= MAX_METHOD_NAME
            and (meta[2] is None or (type(meta[2]) is float and math.isfinite(meta[2])))
            and (meta[3] is None or (type(meta[3]) is str and len(meta[3]) <= MAX_BOOT_ID))
            and meta[4] is None
            and type(meta[6]) is bool
        ):
            call_ids(meta[5])
            return _new(Submit, meta)
        _fields(meta, 7, "SUBMIT")
        cid, method, deadline, expected_boot, proof, acks, shm_ok = meta
        cid = call_id(cid)
        if type(method) is not str or not 0 < len(method) <= MAX_METHOD_NAME:
            raise BadHeader(
                "bad_header", f"a method name must be a str of 1 to {MAX_METHOD_NAME}, got {describe(method)}"
            )
        if deadline is not None and (type(deadline) not in (int, float) or not math.isfinite(deadline)):
            raise BadHeader("bad_header", f"a deadline must be None or finite unix seconds, got {describe(deadline)}")
        if type(shm_ok) is not bool:
            raise BadHeader("bad_header", f"shm_ok must be a bool, got {describe(shm_ok)}")
        return Submit(
            cid,
            method,
            deadline,
            optional(expected_boot, str, MAX_BOOT_ID, "expected boot id"),
            optional(proof, bytes, MAX_PROOF_BYTES, "control proof"),
            call_ids(acks),
            shm_ok,
        )


class Poll(NamedTuple):
    """Client → server: what became of these calls? Each is answered by its RESULT or a STATUS."""

    call_ids: list[bytes]

    def pack(self) -> list[Buffer]:
        return _pack(_POLL, self)

    @staticmethod
    def parse(meta: list[Any]) -> Poll:
        _fields(meta, 1, "POLL")
        return Poll(call_ids(meta[0]))


class Ack(NamedTuple):
    """Client → server: these results arrived; the server may drop them (a tombstone remains)."""

    call_ids: list[bytes]

    def pack(self) -> list[Buffer]:
        return _pack(_ACK, self)

    @staticmethod
    def parse(meta: list[Any]) -> Ack:
        _fields(meta, 1, "ACK")
        return Ack(call_ids(meta[0]))


class Ping(NamedTuple):
    """Client → server: a heartbeat, or a probe after a link drop; answered by a PONG with the same nonce."""

    nonce: int | bytes | str | None

    def pack(self) -> list[Buffer]:
        return _pack(_PING, self)

    @staticmethod
    def parse(meta: list[Any]) -> Ping:
        _fields(meta, 1, "PING")
        return Ping(nonce(meta[0]))


class Result(NamedTuple):
    """Server → client: a call's outcome; the payload is its value (``ok``) or an error state."""

    call_id: bytes
    ok: bool
    boot_id: str  # the server's incarnation: a new one tells the caller the actor restarted

    def pack(self, payload: Payload) -> list[Buffer]:
        return _pack(_RESULT, self, payload)

    @staticmethod
    def parse(meta: list[Any]) -> Result:
        if (  # the common case in one expression; the checks below say what is wrong
            len(meta) == 3
            and type(meta[0]) is bytes
            and 0 < len(meta[0]) <= MAX_CALL_ID_BYTES
            and type(meta[1]) is bool
            and type(meta[2]) is str
            and len(meta[2]) <= MAX_BOOT_ID
        ):
            return _new(Result, meta)
        _fields(meta, 3, "RESULT")
        if type(meta[1]) is not bool:
            raise BadHeader("bad_header", f"a RESULT's ok must be a bool, got {describe(meta[1])}")
        return Result(call_id(meta[0]), meta[1], boot_id(meta[2]))


class Status(NamedTuple):
    """Server → client: what became of a call that has no result to send (see CALL_STATES)."""

    call_id: bytes
    state: str
    boot_id: str

    def pack(self) -> list[Buffer]:
        return _pack(_STATUS, self)

    @staticmethod
    def parse(meta: list[Any]) -> Status:
        _fields(meta, 3, "STATUS")
        if type(meta[1]) is not str or meta[1] not in CALL_STATES:
            states = ", ".join(sorted(CALL_STATES))
            raise BadHeader("bad_header", f"a STATUS's state must be one of {states}, got {describe(meta[1])}")
        return Status(call_id(meta[0]), meta[1], boot_id(meta[2]))


class Pong(NamedTuple):
    """Server → client: the answer to a PING, with the server's incarnation and a few counters."""

    nonce: int | bytes | str | None
    boot_id: str
    stats: dict[str, Any]  # {"constructed": bool, "calls": int}

    def pack(self) -> list[Buffer]:
        return _pack(_PONG, self)

    @staticmethod
    def parse(meta: list[Any]) -> Pong:
        _fields(meta, 3, "PONG")
        if type(meta[2]) is not dict:
            raise BadHeader("bad_header", f"a PONG's stats must be a map, got {describe(meta[2])}")
        return Pong(nonce(meta[0]), boot_id(meta[1]), meta[2])


#: The type of each kind's meta.
MESSAGES: dict[Kind, type] = {
    Kind.SUBMIT: Submit,
    Kind.POLL: Poll,
    Kind.ACK: Ack,
    Kind.PING: Ping,
    Kind.RESULT: Result,
    Kind.STATUS: Status,
    Kind.PONG: Pong,
}


def _fields(meta: list[Any], count: int, kind: str) -> None:
    if len(meta) != count:
        raise BadHeader("bad_header", f"a {kind} header has {count} field{'s' * (count > 1)}, got {len(meta)}")


#: A request whose body is at most this many bytes (and has no out-of-band buffers) is its own fingerprint: most
#: calls are this small, and hashing them would cost more than keeping them.
RAW_FINGERPRINT_BYTES = 64


def request_fingerprint(method: str, body: Buffer, buffers: list[Buffer]) -> bytes:
    """What identifies a SUBMIT's request besides its call id: the method, the body, and its buffers' sizes. The
    server dedupes by it (a reused call id with another request is refused); a control call's proof signs it."""
    name = method.encode()
    if not buffers and len(body) <= RAW_FINGERPRINT_BYTES:  # b"r", then the request itself, unambiguously
        return b"r" + len(name).to_bytes(2, "little") + name + bytes(body)
    digest = hashlib.blake2b(b"h" + name, digest_size=16)
    digest.update(body)
    for buffer in buffers:
        digest.update(memoryview(buffer).nbytes.to_bytes(8, "little"))
    return digest.digest()
