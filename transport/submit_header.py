"""The header of a SUBMIT, the one message that starts a call: its fields, packed by the caller, parsed by the actor.

``[call_id, method, deadline, expected_boot, proof, acks, shm_ok]``: the call's id (the server dedupes by it), the
method's name, the deadline in unix seconds (or None), the incarnation the call is meant for (a reply from another
one is refused; None: any), a control call's proof (``runtime.core.control_auth``; else None), the ids of results the
caller received since its last message (acknowledgements ride on calls), and whether the caller shares this
machine's /dev/shm (then large results may come back through shared memory). The body is the encoded arguments.
"""

from __future__ import annotations

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
    call_id,
    call_ids,
    describe,
)
from transport.protocol import Kind

_SUBMIT = Kind.SUBMIT
_pack = wire.pack
_new = tuple.__new__  # a SubmitHeader from a list already checked field by field


class SubmitHeader(NamedTuple):
    """A SUBMIT's meta, field by field (see the module docstring)."""

    call_id: bytes
    method: str
    deadline: float | None
    expected_boot: str | None
    proof: bytes | None
    acks: list[bytes]
    shm_ok: bool

    @staticmethod
    def pack(
        call_id: bytes,
        method: str,
        deadline: float | None,
        expected_boot: str | None,
        proof: bytes | None,
        acks: list[bytes],
        shm_ok: bool,
        payload: tuple[bytes, list[Buffer]],
    ) -> list[Buffer]:
        """The frames of a SUBMIT with these fields and ``payload`` (``codec.encode``'s result). It takes the
        fields, not a SubmitHeader: the caller's send path does not build a tuple it would only take apart."""
        return _pack(_SUBMIT, [call_id, method, deadline, expected_boot, proof, acks, shm_ok], payload)

    @staticmethod
    def parse(meta: list[Any]) -> SubmitHeader:
        """The fields of a received SUBMIT's meta; raises BadHeader on any field of the wrong type or size."""
        if (  # the common case in one expression (an ordinary call); the checks below explain what is wrong
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
            call_ids(meta[5])  # the acknowledgements piggybacked on the call
            return _new(SubmitHeader, meta)
        if len(meta) != 7:
            raise BadHeader("bad_header", f"a SUBMIT header has 7 fields, got {len(meta)}")
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
        return SubmitHeader(
            cid,
            method,
            deadline,
            _optional(expected_boot, str, MAX_BOOT_ID, "expected boot id"),
            _optional(proof, bytes, MAX_PROOF_BYTES, "control proof"),
            call_ids(acks),
            shm_ok,
        )


def _optional(value: Any, kind: type, limit: int, field: str) -> Any:
    if value is None or (type(value) is kind and len(value) <= limit):
        return value
    problem = f"{field} must be None or a {kind.__name__} of at most {limit}, got {describe(value)}"
    raise BadHeader("bad_header", problem)
