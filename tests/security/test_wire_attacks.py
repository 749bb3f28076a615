"""Hostile peers on the wire: header fields of every type and size, result theft, exhaustion of the call store.

Each test aims real messages at a live actor process on loopback (transport.header_checks and the call store's
per-peer budgets are what stop them) and then checks that the actor still serves everyone else correctly.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from typing import Any

import msgpack
import psutil
import pytest
from raw_client import RawClient

from runtime import ActorHandle, spawn
from runtime.core.call_ids import new_call_id
from runtime.internals import StoreLimits
from transport import frames as wire
from transport.codec import encode
from transport.protocol import MAGIC, VERSION, Kind
from transport.type_registry import registered_name

pytestmark = pytest.mark.processes


def _dropped(handle: ActorHandle) -> dict[str, int]:
    return handle.method("__stats__")().result(10)["dropped"]


def test_an_integer_call_id_allocates_nothing_and_is_dropped(target: ActorHandle) -> None:
    """27 bytes with the call id 2**33 once made the actor allocate 8 GiB (bytes(int))."""
    rss = psutil.Process(target.pid).memory_info().rss
    raw = RawClient(target.endpoint)
    try:
        for bad in (2**33, 8 * 1024**2, -1, b"", b"x" * 129, "text", [b"id"], None, 1.5):
            raw.send(raw.pack_submit([bad, "hit", None, None, None, [], False], 1))
            raw.send(wire.pack(Kind.POLL, [[bad]]))
            raw.send(wire.pack(Kind.ACK, [[bad]]))
        assert not raw.socket.poll(500), "a malformed message got an answer"
        assert raw.call("hit", 7) == 7
    finally:
        raw.close()
    assert psutil.Process(target.pid).memory_info().rss - rss < 32 * 1024**2
    dropped = _dropped(target)
    assert dropped["bad_call_id"] == 27 and target.counts().result(10) == {7: 1}


def test_results_go_only_to_the_caller_that_submitted(target: ActorHandle) -> None:
    """POLL with another caller's call id once redirected its result to the poller."""
    owner, thief = RawClient(target.endpoint), RawClient(target.endpoint)
    try:
        call_id, frames = owner.submit_frames("slow", 0.5)
        owner.send(frames)
        time.sleep(0.1)
        thief.send(wire.pack(Kind.POLL, [[call_id]]))
        status = thief.recv()
        assert status.kind is Kind.STATUS and status.meta[1] == "unknown"
        thief.send(frames)  # the very same SUBMIT, replayed from another connection
        ok, error = thief.result(thief.recv())
        assert not ok and error["code"] == "rejected" and "another caller" in error["message"]
        reply = owner.recv()
        assert owner.result(reply) == (True, 0.5)
        thief.send(wire.pack(Kind.ACK, [[call_id]]))  # an ACK from the thief frees nothing
        thief.send(wire.pack(Kind.POLL, [[call_id]]))
        assert thief.recv().meta[1] == "unknown"
        owner.send(wire.pack(Kind.POLL, [[call_id]]))
        assert owner.result(owner.recv()) == (True, 0.5)  # still there for its owner
        assert not thief.socket.poll(300)
    finally:
        owner.close()
        thief.close()


def test_one_peer_cannot_lock_others_out_and_health_always_answers(no_leaks: None) -> None:
    """100k unacknowledged calls from one peer once refused every other peer for the 12 h result TTL."""
    limits = StoreLimits(max_calls=30, max_calls_per_peer=20, control_reserve_calls=8)
    actor = spawn("attack_actors:Target", name="budgeted", limits=limits)
    greedy, other = RawClient(actor.endpoint), RawClient(actor.endpoint)
    try:
        codes = []
        for key in range(25):  # never acknowledged
            _, frames = greedy.submit_frames("hit", key)
            greedy.send(frames)
            ok, value = greedy.result(greedy.recv())
            codes.append("ok" if ok else value["code"])
        assert codes == ["ok"] * 20 + ["over_capacity"] * 5
        _, frames = greedy.submit_frames("hit", 99)
        greedy.send(frames)
        ok, error = greedy.result(greedy.recv())
        assert not ok and "max_calls_per_peer=20" in error["message"]
        served = 0
        while True:  # the second peer is served until the whole store is full (some of it holds the spawner's
            _, frames = other.submit_frames("hit", 100 + served)  # own construct call until it acknowledges)
            other.send(frames)
            ok, error = other.result(other.recv())
            if not ok:
                break
            served += 1
        assert served >= 8 and "max_calls=30" in error["message"]  # the store is full for ordinary calls...
        assert actor.process_health().result(10)["store"]["calls"] >= 30  # ...but health has its reserve
        assert actor.method("__stats__")().result(10)["store"]["calls"] >= 30
    finally:
        greedy.close()
        other.close()
        actor.kill()


def _mutations(rng: random.Random) -> Iterator[list[Any]]:
    """Almost-valid messages: every kind, every header field swapped for a value of a wrong type or size."""
    odd_values: list[Any] = [
        None, True, 0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 1.5, float("nan"), float("inf"), "", "x" * 300,
        b"", b"\xff" * 200, [], [b"a"] * 5000, {}, {"a": 1}, [[[[[]]]]], "__construct__", "__shutdown__",
    ]  # fmt: skip
    valid = {
        Kind.SUBMIT: lambda: [new_call_id(), "hit", None, None, None, [], False],
        Kind.POLL: lambda: [[os.urandom(16)]],
        Kind.ACK: lambda: [[os.urandom(16)]],
        Kind.PING: lambda: [7],
    }
    body = encode([[1], {}])
    for kind, make in valid.items():
        for field in range(len(make())):
            for value in odd_values:
                meta = make()
                meta[field] = value
                yield wire.pack(kind, meta, body if kind is Kind.SUBMIT else None)
    for _ in range(10_000):
        kind = rng.choice(list(valid))
        meta = valid[kind]()
        roll = rng.random()
        if roll < 0.3:
            meta[rng.randrange(len(meta))] = rng.choice(odd_values)
        elif roll < 0.4:
            meta = meta[: rng.randrange(len(meta))] if rng.random() < 0.5 else [*meta, rng.choice(odd_values)]
        frames = wire.pack(kind, meta, body if kind is Kind.SUBMIT else None)
        head = bytearray(bytes(frames[0]))
        if roll >= 0.4:  # damage the frame itself: magic, version, kind, meta length, bytes, truncation
            spot = rng.randrange(len(head))
            choice = rng.randrange(6)
            if choice == 0:
                head[0:2] = rng.choice([b"MA", b"XX", MAGIC[::-1]])
            elif choice == 1:
                head[2] = rng.choice([VERSION, VERSION + 1, 0, 255])
            elif choice == 2:
                head[3] = rng.randrange(256)
            elif choice == 3:
                head[4:8] = rng.randrange(2**32).to_bytes(4, "little")
            elif choice == 4:
                head[spot] = rng.randrange(256)
            else:
                del head[spot:]
        extra = [os.urandom(rng.randrange(64))] if rng.random() < 0.05 else []
        yield [bytes(head), *frames[1:], *extra]


def test_ten_thousand_almost_valid_messages_run_nothing_and_break_nothing(target: ActorHandle) -> None:
    raw = RawClient(target.endpoint)
    sent = 0
    try:
        for frames in _mutations(random.Random(12)):
            raw.send(frames)
            sent += 1
            while raw.socket.poll(0):  # read what comes back so nothing piles up
                raw.socket.recv_multipart()
        assert sent >= 10_000
        deadline = time.monotonic() + 30
        while raw.socket.poll(1000) and time.monotonic() < deadline:
            raw.socket.recv_multipart()
        assert raw.call("hit", 424242) == 424242
    finally:
        raw.close()
    assert target.process.alive()
    health = target.process_health().result(10)
    assert health["name"] == "target" and health["constructed"]
    stats = target.method("__stats__")().result(10)
    assert stats["unauthorized_total"] > 0 and sum(stats["dropped"].values()) > 1000
    assert target.hit(5).result(10) == 5


def test_handles_inside_arguments_open_no_connections(target: ActorHandle) -> None:
    """ActorHandles decoded from the wire once made the actor open a connection each, never released."""
    fds = psutil.Process(target.pid).num_fds()
    handles = [
        ActorHandle(endpoint=f"tcp://127.0.0.1:{20000 + i}", name=f"h{i}", class_path="x:Y", boot_id=None, host="",
                    pid=0)
        for i in range(300)
    ]  # fmt: skip
    assert target.count(handles).result(30) == 300
    assert psutil.Process(target.pid).num_fds() - fds < 10
    name = registered_name(ActorHandle)
    raw = RawClient(target.endpoint)
    try:  # a handle state with fields of the sender's making is refused, not constructed
        for extra in ({"spawn_token": "00" * 32}, {"connection": None}, {"endpoint": "inproc://x"}, {"pid": "1"}):
            state = {**handles[0].to_state(), **extra}
            handle = msgpack.ExtType(4, msgpack.packb([name, state], use_bin_type=True))
            body = msgpack.packb([[[handle]], {}], use_bin_type=True)
            raw.send(wire.pack(Kind.SUBMIT, [new_call_id(), "count", None, None, None, [], False], (body, [])))
            ok, error = raw.result(raw.recv())
            assert not ok and "handle" in error["message"], error
        assert raw.call("count", [1, 2]) == 2
    finally:
        raw.close()
