"""Each wire message's pack and parse (transport.messages): round trips through real frames, and hostile meta refused.

The shapes follow the runtime's own senders (runtime.caller.connection, runtime.core.outcome,
runtime.actor.call_routing, runtime.caller.link_liveness, runtime.actor.actor_server); the refusals are what a broken
or hostile peer could send.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from transport import frames as wire
from transport.codec import decode, encode
from transport.header_checks import MAX_BOOT_ID, MAX_CALL_ID_BYTES, MAX_IDS_PER_MESSAGE, MAX_METHOD_NAME, BadHeader
from transport.messages import (
    MESSAGES,
    RAW_FINGERPRINT_BYTES,
    Ack,
    Ping,
    Poll,
    Pong,
    Result,
    Status,
    Submit,
    request_fingerprint,
)
from transport.protocol import Kind

CID = bytes(range(16))
SUBMIT = Submit(CID, "train@io", 1.7e9, "boot-a", None, [b"x" * 16, b"y" * 16], True)

# (message, payload or None): one of each kind, as the runtime sends them
EXAMPLES: list[tuple[Any, Any]] = [
    (SUBMIT, [[1, 2], {"lr": 0.1}]),
    (Submit(CID, "__control_stop__", None, None, b"p" * 32, [], False), [[], {}]),
    (Poll([CID, b"z" * 16]), None),
    (Ack([CID]), None),
    (Ping(7), None),
    (Ping("probe-1"), None),
    (Result(CID, True, "boot-a"), {"value": 3}),
    (Result(CID, False, "boot-a"), {"code": "remote", "type": "", "message": "m", "traceback": ""}),
    (Status(CID, "running", "boot-a"), None),
    (Pong(7, "boot-a", {"constructed": True, "calls": 2}), None),
]


def _received(frames: list[Any]) -> wire.Message:
    return wire.unpack(frames, max_header_bytes=1 << 20)


def test_every_kind_has_one_message_type() -> None:
    assert set(MESSAGES) == set(Kind)
    assert {type(message) for message, _ in EXAMPLES} == set(MESSAGES.values())


@pytest.mark.parametrize(("message", "value"), EXAMPLES, ids=[type(message).__name__ for message, _ in EXAMPLES])
def test_pack_then_parse_gives_the_message_back(message: Any, value: Any) -> None:
    frames = message.pack(encode(value)) if value is not None else message.pack()
    received = _received(frames)
    assert MESSAGES[received.kind] is type(message)
    parsed = type(message).parse(received.meta)
    assert parsed == message and type(parsed) is type(message)
    if value is not None:
        assert decode(received.body, received.buffers) == value
    else:
        assert received.body is None


def test_a_message_packs_as_the_plain_list_of_its_fields() -> None:
    """The wire layout did not change: a NamedTuple's meta is the msgpack array a list of its fields makes."""
    payload = encode([[1], {}])
    assert SUBMIT.pack(payload) == wire.pack(Kind.SUBMIT, list(SUBMIT), payload)
    assert Result(CID, True, "b").pack(payload) == wire.pack(Kind.RESULT, [CID, True, "b"], payload)


def test_parse_accepts_what_the_slow_path_allows() -> None:
    """An int deadline (from another msgpack packer) and a bytes nonce parse; the fast path only takes floats."""
    head = Submit.parse([CID, "m", 1_700_000_000, None, None, [], False])
    assert head.deadline == 1_700_000_000
    assert Ping.parse([b"n" * MAX_CALL_ID_BYTES]).nonce == b"n" * MAX_CALL_ID_BYTES
    assert Ping.parse([None]).nonce is None


def _submit(**changes: Any) -> list[Any]:
    return list(SUBMIT._replace(**changes))


@pytest.mark.parametrize(
    ("kind", "meta", "reason", "match"),
    [
        (Submit, _submit()[:6], "bad_header", "7 fields, got 6"),
        (Submit, [*_submit(), None], "bad_header", "7 fields, got 8"),
        (Submit, _submit(call_id=b""), "bad_call_id", "call id"),
        (Submit, _submit(call_id="a str"), "bad_call_id", "call id"),
        (Submit, _submit(call_id=b"x" * (MAX_CALL_ID_BYTES + 1)), "bad_call_id", "call id"),
        (Submit, _submit(method=""), "bad_header", "method name"),
        (Submit, _submit(method="m" * (MAX_METHOD_NAME + 1)), "bad_header", "method name"),
        (Submit, _submit(method=b"train"), "bad_header", "method name"),
        (Submit, _submit(deadline=math.inf), "bad_header", "deadline"),
        (Submit, _submit(deadline=math.nan), "bad_header", "deadline"),
        (Submit, _submit(deadline="soon"), "bad_header", "deadline"),
        (Submit, _submit(expected_boot="b" * (MAX_BOOT_ID + 1)), "bad_header", "expected boot id"),
        (Submit, _submit(expected_boot=b"boot"), "bad_header", "expected boot id"),
        (Submit, _submit(proof="proof"), "bad_header", "control proof"),
        (Submit, _submit(proof=b"p" * 65), "bad_header", "control proof"),
        (Submit, _submit(acks=b"not a list"), "bad_header", "call ids"),
        (Submit, _submit(acks=[CID] * (MAX_IDS_PER_MESSAGE + 1)), "bad_header", "call ids"),
        (Submit, _submit(acks=[CID, 5]), "bad_call_id", "call id"),
        (Submit, _submit(acks=[b""]), "bad_call_id", "call id"),
        (Submit, _submit(shm_ok=1), "bad_header", "shm_ok"),
        (Poll, [], "bad_header", "POLL header has 1 field, got 0"),
        (Poll, [[CID], [CID]], "bad_header", "1 field, got 2"),
        (Poll, [CID], "bad_header", "call ids"),
        (Ack, [[CID, "id"]], "bad_call_id", "call id"),
        (Ack, [{"id": CID}], "bad_header", "call ids"),
        (Ping, [], "bad_header", "PING header has 1 field"),
        (Ping, [[1]], "bad_header", "nonce"),
        (Ping, [1.5], "bad_header", "nonce"),
        (Ping, ["n" * (MAX_CALL_ID_BYTES + 1)], "bad_header", "nonce"),
        (Result, [CID, True], "bad_header", "RESULT header has 3 fields, got 2"),
        (Result, [CID, 1, "boot"], "bad_header", "ok must be a bool"),
        (Result, [b"", True, "boot"], "bad_call_id", "call id"),
        (Result, [CID, True, None], "bad_header", "boot id"),
        (Result, [CID, True, "b" * (MAX_BOOT_ID + 1)], "bad_header", "boot id"),
        (Status, [CID, "running"], "bad_header", "STATUS header has 3 fields"),
        (Status, [CID, "exploded", "boot"], "bad_header", "acked, expired, running, unknown"),
        (Status, [CID, True, "boot"], "bad_header", "state"),
        (Status, [7, "running", "boot"], "bad_call_id", "call id"),
        (Status, [CID, "running", b"boot"], "bad_header", "boot id"),
        (Pong, [7, "boot"], "bad_header", "PONG header has 3 fields"),
        (Pong, [7, 5, {}], "bad_header", "boot id"),
        (Pong, [7, "boot", []], "bad_header", "stats must be a map"),
        (Pong, [[7], "boot", {}], "bad_header", "nonce"),
    ],
)
def test_parse_refuses_malformed_meta_with_its_reason(kind: Any, meta: list[Any], reason: str, match: str) -> None:
    with pytest.raises(BadHeader, match=match) as refused:
        kind.parse(meta)
    assert refused.value.reason == reason
    assert isinstance(refused.value, ValueError)  # what every receiver drops and counts


def test_a_refusal_names_the_type_never_the_content() -> None:
    """An error message may reach a log: it says what the field was, not what a hostile peer wrote into it."""
    with pytest.raises(BadHeader) as refused:
        Submit.parse(_submit(method="secret" * 100))
    assert "secret" not in str(refused.value) and "str of length 600" in str(refused.value)


def test_the_fingerprint_tells_requests_apart() -> None:
    small, other = encode([[1], {}])[0], encode([[2], {}])[0]
    assert request_fingerprint("m", small, []) == request_fingerprint("m", bytes(small), [])
    assert request_fingerprint("m", small, []) != request_fingerprint("m", other, [])
    assert request_fingerprint("m", small, []) != request_fingerprint("n", small, [])
    # a small body is its own fingerprint; no method name and body can be read as another pair
    assert request_fingerprint("ab", b"c", []) != request_fingerprint("a", b"bc", [])
    big = b"x" * (RAW_FINGERPRINT_BYTES + 1)
    assert len(request_fingerprint("m", big, [])) == 16  # hashed
    assert request_fingerprint("m", small, [b"12"]) != request_fingerprint("m", small, [b"123"])
    assert request_fingerprint("m", small, [b"12"]) == request_fingerprint("m", small, [memoryview(b"ab")])
