"""Never hang (issue 13): every call ends, with its value or an error, whatever the method or a peer does.

Sources of the scenarios: Ray's ``exit_actor`` (python/ray/actor.py: "the actor raises an exception and exits. Any
queued methods will fail", an intentional exit is not restarted) and its tests in
python/ray/tests/test_actor_failures.py (test_exit_actor_invalid_usage_error, the exit_actor tests); miles'
RPC executor (miles/utils/workers/rpc/server/executor.py, RpcCallExecutor._run: a cancelled call and a result
that fails to encode still finish with a failed outcome).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from raw_client import RawClient
from waiting import wait_until

from runtime import ActorDied, ActorHandle, OverCapacity, RemoteError, exit_actor, spawn
from runtime.actor.lanes import ThreadLane
from runtime.internals import StoreLimits
from transport import frames as wire
from transport.protocol import Kind
from transport.sockets import shared_context

pytestmark = pytest.mark.processes


@pytest.fixture
def leaver(no_leaks: None) -> Iterator[ActorHandle]:
    actor = spawn("fault_actors:Leaver", name="leaver")
    try:
        yield actor
    finally:
        actor.kill()


def _constructions(log_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log_path.read_text().splitlines()] if log_path.exists() else []


def _exit_code(actor: ActorHandle, timeout_s: float = 10.0) -> int:
    return actor.process.popen.wait(timeout_s)


def _running(actor: ActorHandle, lane: str) -> int:
    return actor.process_health().result(5)["in_flight"].get(lane, 0)


def test_sys_exit_in_a_sync_method_answers_every_call_then_exits_with_its_code(no_leaks: None) -> None:
    """Ray: a method that calls sys.exit ends the actor, and "any queued methods will fail"; here every call in
    flight, also another holder's, gets ActorDied at once, and the process exits with the code given."""
    actor = spawn("fault_actors:Leaver", name="exits-3")
    other = RawClient(actor.endpoint)  # a holder that did not spawn it: only the actor can tell it
    try:
        other_id, frames = other.submit_frames("sleep_io", 30.0)
        other.send(frames)
        running = actor.sleep_io(30.0)
        wait_until(lambda: _running(actor, "io") == 2, "both io calls never ran at once", 10)
        on_loop = actor.sleep_async(30.0)
        started = time.monotonic()
        exiting = actor.exit_with(3)
        queued = actor.sleep(30.0)  # behind it on the default lane, or refused: never run
        for call in (exiting, running, on_loop, queued):
            with pytest.raises(ActorDied, match=r"exits with code 3: method 'exit_with' raised SystemExit\(3\)"):
                call.result(timeout=5)
        assert time.monotonic() - started < 3
        reply = other.recv(timeout_s=5)
        assert reply.kind is Kind.RESULT and bytes(reply.meta[0]) == other_id
        ok, error = other.result(reply)
        assert not ok and error["code"] == "exited" and "SystemExit(3)" in error["message"]
        assert _exit_code(actor) == 3
        with pytest.raises(ActorDied, match="exited with code 3"):  # max_restarts=0: the handle is dead
            actor.add(1).result(timeout=5)
    finally:
        other.close()
        actor.kill()


def test_sigterm_answers_every_call_in_flight_before_the_process_goes(no_leaks: None) -> None:
    """A shutdown (SIGTERM, __shutdown__, the parent gone) is a clean exit that leaves no call unanswered."""
    actor = spawn("fault_actors:Leaver", name="terminated")
    other = RawClient(actor.endpoint)
    try:
        other_id, frames = other.submit_frames("sleep", 30.0)
        other.send(frames)
        wait_until(lambda: _running(actor, "default") == 1, "the call never started", 10)
        os.kill(actor.pid, signal.SIGTERM)
        reply = other.recv(timeout_s=5)
        assert bytes(reply.meta[0]) == other_id
        ok, error = other.result(reply)
        assert not ok and error["code"] == "exited" and "shutting down" in error["message"]
        assert _exit_code(actor) == 0
    finally:
        other.close()
        actor.kill()


@pytest.mark.parametrize("how", ["quit", "quit_async"])
def test_exit_actor_from_a_sync_or_async_method_is_a_clean_exit_never_restarted(
    no_leaks: None, tmp_path: Path, how: str
) -> None:
    """Ray's exit_actor: intentional, so not restarted even with restarts left; outside an actor it is a
    TypeError (test_exit_actor_invalid_usage_error)."""
    with pytest.raises(TypeError, match="outside an actor"):
        exit_actor()
    log_path = tmp_path / "constructions.jsonl"
    actor = spawn("fault_actors:Leaver", kwargs={"log_path": str(log_path)}, max_restarts=3)
    try:
        in_flight = actor.sleep_io(30.0)
        wait_until(lambda: _running(actor, "io") == 1, "the io call never started", 10)
        with pytest.raises(ActorDied, match=rf"exits with code 0: method '{how}' called exit_actor\(\)"):
            actor.method(how)().result(timeout=5)
        with pytest.raises(ActorDied, match="called exit_actor"):
            in_flight.result(timeout=5)
        assert _exit_code(actor) == 0
        with pytest.raises(ActorDied, match="exited with code 0"):
            actor.add(1).result(timeout=5)
        assert len(_constructions(log_path)) == 1
    finally:
        actor.kill()


def test_other_exits_are_restarted_under_max_restarts(no_leaks: None, tmp_path: Path) -> None:
    """SystemExit(n != 0), KeyboardInterrupt (130) and any other BaseException (1) are failures: restarted while
    the budget lasts, then ActorDied naming every exit code."""
    log_path = tmp_path / "constructions.jsonl"
    actor = spawn("fault_actors:Leaver", kwargs={"log_path": str(log_path)}, max_restarts=2)
    try:
        for how, code in (("exit_with", 3), ("interrupt", 130)):
            old_pid = actor.pid
            args = (code,) if how == "exit_with" else ()
            with pytest.raises(ActorDied, match=f"exits with code {code}"):
                actor.method(how)(*args).result(timeout=5)
            wait_until(lambda old=old_pid: actor.pid != old, "the actor was not restarted", 30)
            assert actor.add(1).result(timeout=30) == 2
        with pytest.raises(ActorDied, match=r"exits with code 1: method 'odd_exit' raised _OddExit"):
            actor.odd_exit().result(timeout=5)
        assert _exit_code(actor) == 1  # until it is gone, calls are refused by the leaving process itself
        with pytest.raises(ActorDied, match=r"max_restarts=2\); exit codes: 3, 130, 1"):
            actor.add(1).result(timeout=10)
        assert len(_constructions(log_path)) == 3
    finally:
        actor.kill()


@pytest.mark.parametrize(
    ("kind", "type_name"),
    [("int65", "int"), ("nested", "list"), ("lock", "_thread.lock"), ("generator", "generator")],
)
def test_a_result_that_cannot_be_sent_is_a_remote_error_naming_method_and_type(
    leaver: ActorHandle, kind: str, type_name: str
) -> None:
    """miles' executor: encoding the result is part of the call, so its failure is the call's failure. Both
    encoders: the handle's (same host: shared memory allowed) and a raw client's (plain frames)."""
    expected = rf"method 'unsendable' returned a value that cannot be sent: a {type_name} \("
    with pytest.raises(RemoteError, match=expected):
        leaver.unsendable(kind).result(timeout=10)
    raw = RawClient(leaver.endpoint)
    try:
        with pytest.raises(RuntimeError, match="returned a value that cannot be sent"):
            raw.call("unsendable", kind)
    finally:
        raw.close()
    assert leaver.add(1).result(timeout=5) == 2  # the default lane still serves
    assert leaver.method("__stats__")().result(timeout=5)["lane_failures"] == 0


def test_an_exception_that_cannot_describe_itself_still_answers_its_call(leaver: ActorHandle) -> None:
    """Its str() raises while the error is encoded: once that killed the lane thread, and every later call on the
    lane hung."""
    with pytest.raises(RemoteError, match="_Unprintable"):
        leaver.unprintable().result(timeout=10)
    assert leaver.add(2).result(timeout=5) == 3


def test_a_lane_thread_survives_whatever_escapes_a_job(caplog: pytest.LogCaptureFixture) -> None:
    """The lane reports a job that raises (even a BaseException) and serves the next one."""
    delivered: list[Any] = []
    done = threading.Event()

    def deliver(value: Any) -> None:
        delivered.append(value)
        done.set()

    def escapes() -> Any:
        raise SystemExit(9)

    lane = ThreadLane("survivor", 1, deliver)
    try:
        with caplog.at_level(logging.ERROR, logger="runtime.actor.lanes"):
            lane.submit(escapes)
            lane.submit(lambda: "next")
            assert done.wait(5)
        assert delivered == ["next"] and lane.failures == 1
        assert "a job raised; the lane keeps serving" in caplog.text
    finally:
        lane.stop()


@pytest.mark.parametrize(("how", "message"), [("raise_cancelled", "given up"), ("cancelled_by_itself", "cancelled")])
def test_a_cancelled_async_method_ends_its_call_with_an_error(leaver: ActorHandle, how: str, message: str) -> None:
    """miles' executor finishes a cancelled call with a failed outcome; once the call stayed "running" forever."""
    with pytest.raises(RemoteError, match=rf"CancelledError: .*{message}"):
        leaver.method(how)().result(timeout=5)
    assert leaver.add(3).result(timeout=5) == 4


def test_control_calls_poll_and_ack_get_through_a_full_store(no_leaks: None) -> None:
    """With max_calls reached and the default lane blocked, health, a control-plane method, an object release,
    POLL and ACK are all still answered (the store's control reserve; nothing else in their way)."""
    limits = StoreLimits(max_calls=4, max_calls_per_peer=4, control_reserve_calls=8)
    actor = spawn("fault_actors:Leaver", name="full", limits=limits)
    raw = RawClient(actor.endpoint)
    try:
        filled: list[bytes] = []
        while len(filled) < 10:
            call_id, frames = raw.submit_frames("sleep", 30.0)
            raw.send(frames)
            filled.append(call_id)
            if not raw.socket.poll(300):
                continue
            ok, error = raw.result(raw.recv())
            assert not ok and error["code"] == "over_capacity", error
            break
        else:
            pytest.fail("the store never filled up")
        with pytest.raises(OverCapacity):
            actor.add(1).result(timeout=5)
        assert actor.process_health().result(timeout=5)["store"]["calls"] >= 4
        assert actor.ping().result(timeout=5) == "pong"
        assert actor.method("__object_free__")("no-such-object").result(timeout=5) is False
        raw.send(wire.pack(Kind.POLL, [[filled[0]]]))
        status = raw.recv(timeout_s=5)
        assert status.kind is Kind.STATUS and status.meta[1] == "running"
        raw.send(wire.pack(Kind.ACK, [[filled[0]]]))  # not finished: nothing to free, and nothing breaks
        assert actor.ping().result(timeout=5) == "pong"
    finally:
        raw.close()
        actor.kill()


def test_a_cancelled_local_future_logs_no_error_when_its_result_arrives(
    leaver: ActorHandle, caplog: pytest.LogCaptureFixture
) -> None:
    """The caller gave up (future.cancel(), or the awaiting task was cancelled): the result that comes later is
    acknowledged quietly; it once raised InvalidStateError in the reply handler."""

    async def await_then_cancel() -> None:
        task = asyncio.ensure_future(_await(leaver.sleep(0.3)))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with caplog.at_level(logging.WARNING):
        given_up = leaver.sleep(0.3)
        assert given_up.future.cancel()
        asyncio.run(await_then_cancel())
        assert leaver.add(1).result(timeout=5) == 2  # same lane, after both: their results have arrived
        time.sleep(0.05)  # the loop thread may still be handling the last of them
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith(("runtime", "transport"))]
    assert not errors, [r.getMessage() for r in errors]


async def _await(call: Any) -> Any:
    return await call


def test_a_peer_that_stops_reading_holds_up_no_other_peer(leaver: ActorHandle) -> None:
    """One DEALER floods PINGs and never reads a PONG: its pipe fills, its own bounded queue fills, its replies
    are dropped; every other caller is answered at once (once, they all waited and then declared the actor dead
    after the 10 s liveness timeout)."""
    deaf = shared_context().socket(zmq.DEALER)
    deaf.setsockopt(zmq.LINGER, 0)
    deaf.setsockopt(zmq.RCVHWM, 1)
    deaf.setsockopt(zmq.RCVBUF, 4096)
    deaf.setsockopt(zmq.SNDHWM, 0)
    deaf.connect(leaver.endpoint)
    try:
        sent, deadline = 0, time.monotonic() + 60
        while time.monotonic() < deadline:
            for _ in range(20_000):
                deaf.send_multipart(wire.pack(Kind.PING, [sent]))
                sent += 1
            started = time.monotonic()
            assert leaver.add(sent).result(timeout=5) == sent + 1
            assert time.monotonic() - started < 1.0, f"a call took {time.monotonic() - started:.2f} s"
            if leaver.method("__stats__")().result(timeout=5)["dropped"].get("peer_queue_full", 0):
                break
        else:
            pytest.fail(f"{sent} PINGs never filled the deaf peer's queue")
        for n in range(20):  # while its queue stays full
            started = time.monotonic()
            assert leaver.add(n).result(timeout=5) == n + 1
            assert time.monotonic() - started < 1.0
    finally:
        deaf.close(linger=0)
