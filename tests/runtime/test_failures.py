"""Failures: dead actors, blocked actors, resends, TTL, budgets, garbage on the wire."""

from __future__ import annotations

import concurrent.futures
import os
import random
import signal
import time

import psutil
import pytest
from raw_client import RawClient
from waiting import wait_until

from runtime import ActorDied, ActorHandle, OverCapacity, spawn
from runtime.caller.client import ClientRuntime
from runtime.core.call_ids import new_call_id
from runtime.internals import StoreLimits
from transport import frames as wire
from transport.protocol import Kind

pytestmark = pytest.mark.processes


def test_control_plane_answers_while_sync_method_sleeps(counter: ActorHandle) -> None:
    slow = counter.sleep(5.0)
    time.sleep(0.2)
    started = time.monotonic()
    assert counter.heartbeat().result(timeout=2) > 0
    health = counter.process_health().result(timeout=2)
    assert time.monotonic() - started < 1.0
    assert health["in_flight"]["default"] == 1 and not slow.done()
    assert slow.result(timeout=10) == 5.0


def test_async_control_plane_method_is_awaited_on_the_control_lane(counter: ActorHandle) -> None:
    """An async control-plane method is awaited on the server's loop (it once returned its un-awaited coroutine)."""
    control_lane = counter.control_thread().result(timeout=10)
    slow = counter.sleep(3.0)
    time.sleep(0.2)
    started = time.monotonic()
    assert counter.async_control_thread().result(timeout=2) == control_lane
    assert time.monotonic() - started < 1.0
    assert slow.result(timeout=10) == 3.0


def test_a_running_async_control_plane_call_can_be_cancelled(counter: ActorHandle) -> None:
    """Its task runs on the server's own loop, not a group loop: ``__cancel__`` reaches it there too."""
    running = counter.async_control_sleep(30.0)
    time.sleep(0.3)
    started = time.monotonic()
    assert running.cancel()
    with pytest.raises(concurrent.futures.CancelledError):
        running.result(5)
    assert time.monotonic() - started < 5
    wait_until(lambda: counter.control_cancelled().result(timeout=5) == 1, "the coroutine never saw CancelledError", 5)
    assert counter.async_control_thread().result(timeout=5)  # the control lane goes on serving


def test_kill_9_mid_call_gives_actor_died_within_3s(counter: ActorHandle) -> None:
    pending = counter.sleep(30.0)
    time.sleep(0.3)
    killed_at = time.monotonic()
    os.kill(counter.pid, signal.SIGKILL)
    with pytest.raises(ActorDied, match="exited with code -9"):
        pending.result(timeout=3.0)
    assert time.monotonic() - killed_at < 3.0
    with pytest.raises(ActorDied):
        counter.add(1).result(timeout=3.0)


def test_unreachable_actor_is_declared_dead_by_heartbeat(no_leaks: None) -> None:
    """Without a process watcher (a handle from elsewhere), silence past the liveness timeout means death."""
    from runtime import connect

    owner = spawn("sample_actors:Counter")
    try:
        stranger = connect(owner.endpoint)
        stranger.connection.liveness_timeout_s = 1.5
        pending = stranger.sleep(30.0)
        time.sleep(0.3)
        os.kill(owner.pid, signal.SIGSTOP)  # frozen: no answers, no exit
        with pytest.raises(ActorDied, match="no answer"):
            pending.result(timeout=5.0)
    finally:
        os.kill(owner.pid, signal.SIGCONT)
        owner.kill()


def test_resent_submit_runs_once(counter: ActorHandle) -> None:
    raw = RawClient(counter.endpoint)
    try:
        call_id, frames = raw.submit_frames("add", 1)
        for _ in range(5):
            raw.send(frames)
        replies = [raw.recv() for _ in range(5)]
        results = [raw.result(m) for m in replies if m.kind is Kind.RESULT]
        assert results and all(r == (True, 11) for r in results)
        # after the ACK, a late duplicate is recognised by its tombstone
        raw.send(wire.pack(Kind.ACK, [[call_id]]))
        raw.send(frames)
        late = raw.recv()
        assert late.kind is Kind.STATUS and late.meta[1] == "acked"
        # same id, different request: refused, not run
        _, other = raw.submit_frames("add", 2, call_id=call_id)
        raw.send(other)
        assert raw.recv().kind is Kind.STATUS  # tombstoned ids stay answered as acked
        assert counter.call_count().result(10) == 1
    finally:
        raw.close()


def test_call_id_reuse_with_different_request_is_rejected(counter: ActorHandle) -> None:
    raw = RawClient(counter.endpoint)
    try:
        call_id, frames = raw.submit_frames("sleep", 0.5)
        raw.send(frames)
        _, other = raw.submit_frames("add", 2, call_id=call_id)
        raw.send(other)
        ok, error = raw.result(raw.recv())
        assert not ok and error["code"] == "rejected" and "different request" in error["message"]
        assert raw.result(raw.recv()) == (True, 0.5)
    finally:
        raw.close()


def test_result_ttl_expiry_frees_memory(no_leaks: None) -> None:
    actor = spawn("sample_actors:Counter", limits=StoreLimits(result_ttl_s=0.5))
    raw = RawClient(actor.endpoint)
    try:
        _, frames = raw.submit_frames("blob", 2_000_000)
        raw.send(frames)
        assert raw.result(raw.recv())[0]  # received but never acknowledged
        stats = actor.method("__stats__")().result(10)
        assert stats["store"]["bytes"] >= 2_000_000 and stats["store"]["unacked_results"] == 1
        time.sleep(1.5)
        stats = actor.method("__stats__")().result(10)
        assert stats["store"]["bytes"] < 1000 and stats["store"]["expired_total"] == 1  # only this stats call
    finally:
        raw.close()
        actor.kill()


def test_memory_budget_refuses_with_over_capacity(no_leaks: None) -> None:
    actor = spawn("sample_actors:Counter", limits=StoreLimits(memory_budget_bytes=3_000_000))
    raw = RawClient(actor.endpoint)
    try:
        _, frames = raw.submit_frames("blob", 2_000_000)
        raw.send(frames)
        raw.recv()  # held: never acknowledged
        _, frames = raw.submit_frames("blob", 2_000_000)
        raw.send(frames)
        raw.recv()
        with pytest.raises(OverCapacity, match="over memory_budget_bytes=3000000"):
            actor.add(1).result(10)
    finally:
        raw.close()
        actor.kill()


def test_fuzzed_frames_leave_the_server_serving(counter: ActorHandle) -> None:
    rng = random.Random(1234)
    raw = RawClient(counter.endpoint)
    try:
        valid_head = wire.pack(Kind.SUBMIT, [new_call_id(), "recorded", None, None, False, [], False])[0]
        for i in range(3000):
            choice = i % 5
            if choice == 0:
                frames = [rng.randbytes(rng.randint(0, 64)) for _ in range(rng.randint(1, 4))]
            elif choice == 1:  # right magic and version, garbage after
                frames = [b"MA\x01" + rng.randbytes(rng.randint(0, 40))]
            elif choice == 2:  # valid meta, garbage body
                frames = [valid_head + rng.randbytes(rng.randint(1, 40))]
            elif choice == 3:  # truncated valid head
                frames = [valid_head[: rng.randint(0, len(valid_head))]]
            else:  # meta of the wrong shape
                frames = [wire.pack(Kind(rng.choice([1, 2, 3, 4])), [rng.randint(0, 9)] * rng.randint(0, 3))[0]]
            raw.send(frames)
        assert counter.add(1).result(timeout=60) == 11
        dropped, deadline = 0, time.monotonic() + 30  # the control lane may answer before the lane drains
        while dropped <= 500 and time.monotonic() < deadline:
            dropped = sum(counter.method("__stats__")().result(10)["dropped"].values())
            time.sleep(0.05)
        assert dropped > 500
    finally:
        raw.close()


def test_a_driver_that_outlives_many_actors_keeps_no_socket_for_the_dead_ones(no_leaks: None) -> None:
    """The suite's own driver once ran out of sockets (EMFILE) after about a thousand actors had come and gone:
    the client kept every dead actor's connection open until shutdown."""
    me = psutil.Process()

    def spawn_call_kill(count: int) -> None:
        for _ in range(count):
            actor = spawn("sample_actors:Counter")
            try:
                assert actor.add(1).result(timeout=30) == 1
            finally:
                actor.kill()

    spawn_call_kill(2)  # the runtime's own sockets and the fork server are in place
    time.sleep(2.5)  # a dead actor's socket closes 2 s after its death
    before = me.num_fds()
    spawn_call_kill(12)  # each held a socket, a monitor socket and descriptors of ZeroMQ's own while it lived
    wait_until(lambda: me.num_fds() <= before + 4, f"descriptors stayed open: {before} before, now", timeout_s=10)
    runtime = ClientRuntime.get()
    spawn("sample_actors:Counter").kill()  # a new connection forgets the dead ones whose sockets are closed
    assert sum(1 for c in runtime.connections.values() if c.dead is not None and c.socket_closed) == 0
