"""The call store (runtime.actor.call_store): ids refused when they may have been forgotten, results kept until acked,
tombstones, and the bytes and calls counted per caller. Pure: no process, no socket, times passed in."""

from __future__ import annotations

import pytest

from runtime.actor.call_store import (
    CallRecord,
    CallState,
    CallStore,
    StoreLimits,
    Tombstone,
)
from runtime.core.call_ids import CALL_ID_BYTES, made_at_ms
from transport.messages import request_fingerprint

PEER, OTHER = b"peer-a", b"peer-b"


def _id(made_at_s: float, counter: int = 0, prefix: bytes = b"\x01" * 8) -> bytes:
    """A call id of runtime.core.call_ids' form made at ``made_at_s`` (unix seconds)."""
    return prefix + ((int(made_at_s * 1000) << 16) | counter).to_bytes(8, "big")


def _released() -> tuple[CallStore, list[list[str]]]:
    released: list[list[str]] = []
    limits = StoreLimits(tombstone_ttl_s=600.0, max_clock_skew_s=60.0)
    return CallStore(limits=limits, release_files=released.append), released


def _running(store: CallStore, call_id: bytes, peer: bytes = PEER, nbytes: int = 100) -> CallRecord:
    record = CallRecord(call_id=call_id, fingerprint=b"f", method="m", peer=peer)
    store.add(record, nbytes)
    return record


def test_the_id_helper_matches_runtime_call_ids() -> None:
    made = _id(1_700_000_000.5, counter=7)
    assert len(made) == CALL_ID_BYTES and made_at_ms(made) == 1_700_000_000_500


def test_a_fresh_id_is_accepted_and_ids_of_another_form_are_refused() -> None:
    store = CallStore()
    now = 1_700_000_000.0
    assert store.id_problem(_id(now), now) is None
    assert store.id_problem(_id(now - 59.0), now) is None  # within the skew behind
    assert store.id_problem(_id(now + 59.0), now) is None  # within the skew ahead
    problem = store.id_problem(b"short", now)
    assert problem is not None and f"{CALL_ID_BYTES} bytes" in problem and "got 5 bytes" in problem


def test_an_id_from_a_clock_running_ahead_is_refused_with_the_fix() -> None:
    store = CallStore()
    now = 1_700_000_000.0
    problem = store.id_problem(_id(now + 61.0), now)
    assert problem is not None and "in the future" in problem and "NTP" in problem


def test_an_id_older_than_the_store_remembers_is_refused_as_stale() -> None:
    store = CallStore(limits=StoreLimits(tombstone_ttl_s=600.0, max_clock_skew_s=60.0))
    now = 1_700_000_000.0
    assert store.id_problem(_id(now - 539.0), now) is None  # ttl - skew = 540 s
    problem = store.id_problem(_id(now - 541.0), now)
    assert problem is not None and problem.startswith("stale call id: made 541.0 s ago")


def test_limits_refuse_a_ttl_that_does_not_exceed_twice_the_skew() -> None:
    with pytest.raises(ValueError, match=r"tombstone_ttl_s=100\.0 must exceed twice max_clock_skew_s=60\.0"):
        StoreLimits(tombstone_ttl_s=100.0, max_clock_skew_s=60.0)


def test_bytes_move_from_arguments_to_result_and_are_freed_by_the_callers_ack() -> None:
    store, released = _released()
    now = 1_700_000_000.0
    call_id = _id(now)
    record = _running(store, call_id, nbytes=100)
    assert store.lookup(call_id) is record and record.state is CallState.RUNNING
    assert (store.nbytes, store.peer_bytes[PEER], store.peer_calls[PEER]) == (100, 100, 1)

    assert store.ack(call_id, PEER, now) is False  # still running: nothing to free
    assert store.finish(record, [b"0123456789", bytearray(5)], now) is True
    assert record.state is CallState.DONE and (store.nbytes, store.peer_bytes[PEER]) == (15, 15)

    assert store.ack(call_id, OTHER, now) is False  # only the caller may acknowledge
    record.shared = ["/dev/shm/result-1"]
    assert store.ack(call_id, PEER, now) is True
    assert store.lookup(call_id) is Tombstone.ACKED and released == [["/dev/shm/result-1"]]
    assert store.nbytes == 0 and PEER not in store.peer_calls and PEER not in store.peer_bytes
    assert store.ack(call_id, PEER, now) is False  # a second ACK frees nothing
    assert store.stats() == {
        "calls": 0, "running": 0, "unacked_results": 0, "bytes": 0, "tombstones": 1, "expired_total": 0,
        "tombstones_crowded_out_total": 0,
    }  # fmt: skip


def test_a_result_nobody_waits_for_is_not_kept_and_its_files_are_freed() -> None:
    store, released = _released()
    now = 1_700_000_000.0
    forgotten = _running(store, _id(now, 1))
    store.forget(forgotten)  # refused before it ran: no tombstone, its id may be sent again
    assert store.lookup(forgotten.call_id) is None and store.nbytes == 0 and not store.peer_calls
    forgotten.shared = ["/dev/shm/late"]
    assert store.finish(forgotten, [b"x"], now) is False and released == [["/dev/shm/late"]]

    answered = _running(store, _id(now, 2))
    assert store.finish(answered, [b"first"], now) is True
    assert store.finish(answered, [b"second"], now) is False  # answered already
    assert answered.result == [b"first"] and store.nbytes == 5


def test_expiry_buries_old_results_then_drops_old_tombstones_and_refuses_their_ids() -> None:
    store, released = _released()
    store.limits.result_ttl_s = 10.0
    t0 = 1_700_000_000.0
    old, young = _running(store, _id(t0, 1)), _running(store, _id(t0, 2))
    old.shared = ["/dev/shm/old"]
    store.finish(old, [b"a"], t0)
    store.finish(young, [b"b"], t0 + 5.0)

    assert store.expire(t0 + 10.0) == 1
    assert store.lookup(old.call_id) is Tombstone.EXPIRED and store.lookup(young.call_id) is young
    assert released == [["/dev/shm/old"]] and store.expired_total == 1 and store.nbytes == 1

    assert store.expire(t0 + 10.0 + 600.0) == 1  # young's result expires; old's tombstone is past its TTL
    assert store.lookup(old.call_id) is None and store.lookup(young.call_id) is Tombstone.EXPIRED
    assert store.crowded_out_total == 0  # dropped at their TTL, not crowded out
    # The dropped id is refused though it is within the age window: it may have run.
    assert store.id_problem(old.call_id, t0 + 100.0) is not None
    assert store.id_problem(_id(t0 + 1.0), t0 + 100.0) is None  # a newer id is still fine


def test_past_max_tombstones_the_oldest_go_and_no_id_as_old_is_accepted() -> None:
    store, _ = _released()
    store.limits.max_tombstones = 2
    now = 1_700_000_000.0
    ids = [_id(now, counter) for counter in range(3)]
    for call_id in ids:
        record = _running(store, call_id)
        store.finish(record, [b"r"], now)
        store.ack(call_id, PEER, now)
    assert [store.lookup(i) for i in ids] == [None, Tombstone.ACKED, Tombstone.ACKED]
    assert store.crowded_out_total == 1
    problem = store.id_problem(_id(now, 0, prefix=b"\x02" * 8), now)  # another caller's id of the same instant
    assert problem is not None and "max_tombstones=2" in problem
    assert store.id_problem(_id(now, 5), now) is None


def test_a_request_fingerprint_tells_method_body_and_buffer_sizes_apart() -> None:
    assert request_fingerprint("ab", b"c", []) != request_fingerprint("a", b"bc", [])  # the name's length counts
    assert request_fingerprint("m", b"x", []) == b"r\x01\x00mx"  # small requests are their own fingerprint
    big = b"x" * 65
    hashed = request_fingerprint("m", big, [])
    assert len(hashed) == 16 and hashed == request_fingerprint("m", bytearray(big), [])
    assert request_fingerprint("m", b"x", [b"12"]) != request_fingerprint("m", b"x", [b"123"])
    assert request_fingerprint("m", b"x", [b"12"]) == request_fingerprint("m", b"x", [b"34"])  # sizes, not bytes
