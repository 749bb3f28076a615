"""Never twice: an acknowledged call never runs again, a reply from another incarnation is never a result, and a
call refused before it ran leaves its id free. Real actor processes, and raw SUBMITs where a test must misbehave.

Shaped after miles' call store (radixark/miles, ``miles/utils/workers/rpc/server/store.py``: call ids deduplicated
by id and request fingerprint, tombstones for acknowledged calls, a rollback that frees the id of a call refused
before it ran) and its handle's boot-id checks (``client/handle.py``). Where miles refuses new calls while its
tombstones are full, call ids here carry the time they were made and an id the actor may have forgotten is
refused as stale.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from raw_client import RawClient

from runtime import ActorDied, ActorHandle, ActorRestarted, spawn
from runtime.core.call_ids import made_at_ms, new_call_id
from runtime.internals import StoreLimits
from transport import frames as wire
from transport.protocol import Kind

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


def _id_made_at(unix_s: float) -> bytes:
    """A call id of the runtime's form, made at ``unix_s`` by its maker's clock."""
    return os.urandom(8) + ((int(unix_s * 1000) << 16) | 1).to_bytes(8, "big")


def _refusal(raw: RawClient) -> str:
    message = raw.recv()
    ok, error = raw.result(message)
    assert not ok and error["code"] == "rejected", error
    return error["message"]


def test_call_ids_carry_the_time_they_were_made() -> None:
    before = time.time() * 1000
    ids = [new_call_id() for _ in range(1000)]
    assert len(set(ids)) == 1000 and all(len(i) == 16 for i in ids)
    assert all(before - 5 <= made_at_ms(i) <= time.time() * 1000 + 5 for i in ids)
    assert made_at_ms(b"x" * 15) is None


def test_a_late_duplicate_never_runs_again_once_tombstones_are_crowded_out(no_leaks: None) -> None:
    """The issue's case: max_tombstones=2 dropped the oldest tombstone and its late duplicate ran a second time."""
    actor = spawn("sample_actors:Counter", kwargs={"start": 0}, limits=StoreLimits(max_tombstones=2))
    raw = RawClient(actor.endpoint)
    try:
        first_id, first = raw.submit_frames("add", 1)
        raw.send(first)
        assert raw.result(raw.recv()) == (True, 1)
        raw.send(wire.pack(Kind.ACK, [[first_id]]))
        assert raw.call("add", 2) == 3  # acknowledged too
        last_id, last = raw.submit_frames("add", 3)
        raw.send(last)
        assert raw.result(raw.recv()) == (True, 6)
        raw.send(wire.pack(Kind.ACK, [[last_id]]))  # a third tombstone: the first one's is dropped
        raw.send(first)  # the late duplicate: its tombstone is gone, and it must not run
        assert "stale call id" in _refusal(raw)
        raw.send(last)  # a duplicate still remembered is answered as acknowledged
        reply = raw.recv()
        assert reply.kind is Kind.STATUS and reply.meta[1] == "acked"
        stats = actor.method("__stats__")().result(10)
        assert stats["stale_ids_total"] == 1
        assert stats["store"]["tombstones"] <= 2 and stats["store"]["tombstones_crowded_out_total"] >= 1
        assert actor.add(0).result(10) == 6  # 1 + 2 + 3: nothing ran twice
        assert raw.call("add", 4) == 10  # new calls run
    finally:
        raw.close()
        actor.kill()


def test_the_guarantee_holds_across_tombstone_expiry(no_leaks: None) -> None:
    """Tombstones also leave after tombstone_ttl_s: a duplicate arriving later is refused, not run."""
    limits = StoreLimits(tombstone_ttl_s=1.0, max_clock_skew_s=0.2, result_ttl_s=0.4)  # sweeps every 0.1 s
    actor = spawn("sample_actors:Counter", kwargs={"start": 0}, limits=limits)
    raw = RawClient(actor.endpoint)
    try:
        call_id, frames = raw.submit_frames("add", 5)
        raw.send(frames)
        assert raw.result(raw.recv()) == (True, 5)
        raw.send(wire.pack(Kind.ACK, [[call_id]]))
        raw.send(frames)  # while the tombstone lives: answered as acknowledged
        assert raw.recv().meta[1] == "acked"
        time.sleep(1.6)  # the tombstone has expired
        raw.send(frames)
        assert "stale call id" in _refusal(raw)
        assert actor.add(0).result(10) == 5
    finally:
        raw.close()
        actor.kill()


def test_ids_outside_the_window_are_refused_and_never_run(counter: ActorHandle) -> None:
    """Defaults: tombstone_ttl_s=600, max_clock_skew_s=60, so ids older than 540 s or made more than 60 s ahead
    of the actor's clock are refused (without tombstones to remember them, they could be duplicates)."""
    raw = RawClient(counter.endpoint)
    try:
        now = time.time()
        for call_id, why in [
            (_id_made_at(now - 545), r"stale call id: made 545"),
            (_id_made_at(now + 120), r"made 120\.\d s in the future"),
            (b"12345678", r"a call id is 16 bytes made by runtime.core.call_ids .* got 8 bytes"),
        ]:
            _, frames = raw.submit_frames("add", 100, call_id=call_id)
            raw.send(frames)
            message = _refusal(raw)
            assert re.search(why, message), message
        for call_id in (_id_made_at(now - 30), _id_made_at(now + 30)):  # within the window: they run
            _, frames = raw.submit_frames("add", 1, call_id=call_id)
            raw.send(frames)
            assert raw.result(raw.recv())[0]
        assert counter.add(0).result(10) == 12  # 10 + 1 + 1: none of the refused ones ran
    finally:
        raw.close()


def test_a_call_refused_for_bad_arguments_leaves_its_id_free(counter: ActorHandle) -> None:
    raw = RawClient(counter.endpoint)
    try:
        call_id, bad = raw.submit_frames("add", "one")
        raw.send(bad)
        assert "argument 'n'" in _refusal(raw)
        _, corrected = raw.submit_frames("add", 1, call_id=call_id)  # same id, corrected arguments
        raw.send(corrected)
        assert raw.result(raw.recv()) == (True, 11)
        raw.send(corrected)  # and now the id is used: a resend is a duplicate, not a second run
        assert raw.result(raw.recv()) == (True, 11)
        assert counter.call_count().result(10) == 1
    finally:
        raw.close()


IMPOSTOR = """
import zmq
from transport import frames as wire
from transport.codec import encode
from transport.protocol import Kind
from transport.sockets import shared_context

socket = shared_context().socket(zmq.ROUTER)
print(socket.bind_to_random_port("tcp://127.0.0.1"), flush=True)
while True:  # every SUBMIT gets the value 42, from incarnation "incarnation-b"
    peer, *frames = socket.recv_multipart()
    message = wire.unpack(frames, max_header_bytes=1 << 20)
    if message.kind is Kind.SUBMIT:
        socket.send_multipart([peer, *wire.pack(Kind.RESULT, [message.meta[0], True, "incarnation-b"], encode(42))])
"""


def test_a_reply_from_another_incarnation_is_never_taken_as_the_result(no_leaks: None) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, "-c", IMPOSTOR], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        port = int(server.stdout.readline())
        handle = ActorHandle(
            endpoint=f"tcp://127.0.0.1:{port}",
            name="pinned",
            class_path="nowhere:Pinned",
            boot_id="incarnation-a",
            host="127.0.0.1",
            pid=server.pid,
        )
        with pytest.raises(ActorRestarted, match="from incarnation incarnation-b, but the call was sent to incarn"):
            handle.method("value")().result(10)
        # The handle stays pinned to incarnation-a (runtime.caller.handle): refused from now on, without being sent.
        with pytest.raises(ActorRestarted, match=r"pinned to incarnation incarnation-a, which is gone \(now incarnat"):
            handle.method("value")().result(10)
        # What answers is not an actor (its "health" is 42): the handle is not moved there.
        with pytest.raises(ActorDied, match=r"what answers at tcp://127\.0\.0\.1:\d+ is not an actor of this runtime"):
            handle.follow_restart(deadline_s=5)
        assert handle.boot_id == "incarnation-a"
        # A handle that follows restarts (as ray_compat's) calls whichever incarnation answers: its reply is taken.
        handle.follows_restarts = True
        assert handle.method("value")().result(10) == 42
        handle.mark_dead("test over")
    finally:
        server.kill()
        server.wait()


def test_calls_held_through_a_slow_restart_are_not_refused_as_stale(no_leaks: None, tmp_path: Path) -> None:
    """A call made while the actor restarts never reached any incarnation: it gets a fresh id when sent, so a
    restart longer than the id horizon (here 1.5 s) does not make it stale."""
    limits = StoreLimits(tombstone_ttl_s=2.0, max_clock_skew_s=0.5)
    kwargs = {"marker": str(tmp_path / "constructions"), "restart_delay_s": 2.5}
    actor = spawn("sample_actors:SlowRestart", kwargs=kwargs, limits=limits, max_restarts=1)
    try:
        assert actor.add(1).result(10) == 1
        in_flight = actor.sleep(30.0)
        time.sleep(0.3)
        os.kill(actor.pid, signal.SIGKILL)
        with pytest.raises(ActorRestarted):
            in_flight.result(timeout=5)
        during = actor.add(2)  # held until the new incarnation is up, about 2.5 s from now
        assert during.result(timeout=30) == 2
    finally:
        actor.kill()
