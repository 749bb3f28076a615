"""Every call style against a real actor process."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import signal
import threading
import time
from typing import Any

import numpy as np
import pytest
import torch
from sample_actors import Color, Counter, Point
from waiting import wait_until

from runtime import ActorGroup, ActorHandle, DeadlineExceeded, RemoteError, gather, get_actor, spawn, spawn_many
from runtime.caller import wait_spin
from transport import local_twin, shared_memory
from transport.endpoints import ZmqEndpoint

pytestmark = pytest.mark.processes


def test_sync_result_and_await(counter: ActorHandle) -> None:
    assert counter.add(5).result(timeout=10) == 15

    async def main() -> int:
        return await counter.add(1)

    assert asyncio.run(main()) == 16


def test_positional_keyword_and_variadic_arguments(counter: ActorHandle) -> None:
    assert counter.add(n=2).result(10) == 12
    assert counter.echo(1, (2, 3), b"x", key={"a": [1.5, None]}).result(10) == [
        [1, (2, 3), b"x"],
        {"key": {"a": [1.5, None]}},
    ]


def test_async_method_and_control_plane(counter: ActorHandle) -> None:
    assert counter.async_add(3).result(10) == 13
    assert counter.heartbeat().result(10) > 0


def test_concurrency_group_runs_on_its_own_threads(counter: ActorHandle) -> None:
    names = {counter.io_thread().result(10) for _ in range(6)}
    assert names and all(name.startswith("lane-io-") for name in names)


def test_serial_group_keeps_submission_order(counter: ActorHandle) -> None:
    calls = [counter.record(i) for i in range(300)]
    gather(calls, timeout=30)
    assert counter.recorded().result(10) == list(range(300))


def test_registered_types_and_arrays_round_trip(counter: ActorHandle) -> None:
    mid, color = counter.midpoint(Point(0, 0), Point(2, 4), Color.BLUE).result(10)
    assert mid == Point(1.0, 2.0) and color is Color.BLUE
    data = np.arange(6 << 20, dtype=np.uint8)  # large: shared memory on this machine
    assert counter.nbytes(data).result(10) == data.nbytes
    returned = counter.array(2 << 20).result(10)
    assert returned.dtype == np.uint8 and returned.shape == (2 << 20,) and returned[255] == 255
    assert counter.blob(300_000).result(10) == b"x" * 300_000


def test_remote_exception_carries_type_and_traceback(counter: ActorHandle) -> None:
    with pytest.raises(RemoteError) as info:
        counter.fail("boom").result(10)
    assert info.value.remote_type == "builtins.ValueError"
    assert "boom" in str(info.value) and "fail" in info.value.remote_traceback
    assert "counter" in str(info.value) and "'fail'" in str(info.value)


def test_deadline_option_raises_deadline_exceeded(counter: ActorHandle) -> None:
    with pytest.raises(DeadlineExceeded, match="sleep"):
        counter.sleep.options(deadline_s=0.3)(2.0).result(10)


def test_result_timeout_raises_deadline_exceeded(counter: ActorHandle) -> None:
    with pytest.raises(DeadlineExceeded, match=r"timeout=0\.2"):
        counter.async_sleep(2.0).result(timeout=0.2)


def test_calls_from_many_threads(counter: ActorHandle) -> None:
    results: list[int] = []

    def worker() -> None:
        results.extend(counter.add(1).result(10) for _ in range(50))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == list(range(11, 211))


def test_calls_from_many_threads_keep_each_threads_order(counter: ActorHandle) -> None:
    def worker(tag: int) -> None:
        gather([counter.record_from(tag, i) for i in range(200)], timeout=30)

    threads = [threading.Thread(target=worker, args=(tag,)) for tag in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    recorded = counter.recorded().result(10)
    assert len(recorded) == 800
    for tag in range(4):
        assert [i for t, i in recorded if t == tag] == list(range(200)), f"thread {tag}'s calls ran out of order"


def test_short_lived_calling_threads_leave_no_descriptors_behind(counter: ActorHandle) -> None:
    def one_call() -> None:
        counter.add(1).result(10)

    def open_descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    one_call()
    before = open_descriptors()
    for _ in range(100):  # each thread gets its own wake-up descriptor while it waits
        thread = threading.Thread(target=one_call)
        thread.start()
        thread.join(10)
    assert open_descriptors() < before + 10


def test_each_kind_of_method_runs_on_its_own_thread(counter: ActorHandle) -> None:
    # The default lane's idle thread reads the socket itself; what it reads for the loop must still run there.
    calls = [(kind, getattr(counter, f"{kind}_thread")()) for _ in range(40) for kind in ("sync", "async", "control")]
    names: dict[str, set[str]] = {"sync": set(), "async": set(), "control": set()}
    for kind, call in calls:
        names[kind].add(call.result(10))
    assert names["sync"] == {"lane-default-0"}
    assert names["async"] == {"group-loop-default"}  # the default group's own event loop (runtime.actor.group_loops)
    assert names["control"] == {"MainThread"}  # the main loop: the control lane and the socket reader


def test_results_of_sync_calls_are_acknowledged_and_freed(counter: ActorHandle) -> None:
    for _ in range(100):
        counter.add(1).result(10)
    deadline = time.monotonic() + 5
    while True:
        store = counter.method("__stats__")().result(10)["store"]
        if store["unacked_results"] <= 1:  # at most the previous __stats__ call
            break
        assert time.monotonic() < deadline, f"results never acknowledged: {store}"
        time.sleep(0.1)


def test_shared_memory_segments_go_back_to_their_pools_once_large_calls_are_done(counter: ActorHandle) -> None:
    size = shared_memory.SHM_THRESHOLD * 2  # above the threshold: both directions go through /dev/shm
    for _ in range(3):
        assert counter.nbytes(np.ones(size, dtype=np.uint8)).result(10) == size
        assert counter.array(size).result(10).nbytes == size
    published = [f"miles-{os.getpid()}-", f"miles-{counter.pid}-"]  # sent, taken or released: not yet back
    deadline = time.monotonic() + 5
    while left := [p.name for p in shared_memory.SHM_DIR.iterdir() if p.name.startswith(tuple(published))]:
        assert time.monotonic() < deadline, f"shared-memory segments never came back to their pools: {left}"
        time.sleep(0.1)


def test_an_actor_killed_by_a_signal_leaves_no_shared_memory_segment(no_leaks: None) -> None:
    actor = spawn(Counter, kwargs={"start": 0})
    try:
        size = shared_memory.SHM_THRESHOLD * 2
        for _ in range(2):  # the actor wrote two results into its pool of segments, which it keeps for the next
            assert actor.array(size).result(10).nbytes == size
        segments = f"miles-seg-{actor.pid}-*"
        deadline = time.monotonic() + 5
        while not list(shared_memory.SHM_DIR.glob(segments)):
            assert time.monotonic() < deadline, "the actor kept no segment for its next large result"
            time.sleep(0.01)
        os.kill(actor.pid, signal.SIGKILL)  # no atexit: the spawner must remove them
        deadline = time.monotonic() + 5
        while left := [*shared_memory.SHM_DIR.glob(segments), *shared_memory.SHM_DIR.glob(f"miles-{actor.pid}-*")]:
            assert time.monotonic() < deadline, f"a killed actor's segments were left behind: {left}"
            time.sleep(0.05)
    finally:
        actor.kill()


def test_named_lookup_and_handle_passing(counter: ActorHandle, no_leaks: None) -> None:
    assert get_actor("counter") is counter
    with pytest.raises(KeyError, match="no actor named 'nobody'"):
        get_actor("nobody")
    other = spawn(Counter, kwargs={"start": 100})
    try:
        assert other.call_other(counter, 1).result(10) == 11
        assert other.call_other_async(counter, 1).result(10) == 12
    finally:
        other.kill()


def test_group_broadcast_and_map(no_leaks: None) -> None:
    handles = spawn_many("sample_actors:Counter", 3, name_prefix="g", kwargs={"start": 1})
    group = ActorGroup(handles)
    try:
        assert group.add(1).result(10) == [2, 2, 2]
        assert group.map("add", [{"n": 1}, {"n": 2}, {"n": 3}]).result(10) == [3, 4, 5]

        async def broadcast() -> list[int]:
            return await group.async_add(10)

        assert asyncio.run(broadcast()) == [13, 14, 15]
        assert len({pid for pid in group.get_pid().result(10)}) == 3
    finally:
        group.kill()


def test_torch_tensors_keep_dtype_and_strides(counter: ActorHandle) -> None:
    tensor = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4).t()
    with pytest.raises(RemoteError, match="has not imported torch"):  # the counter's process never imports torch
        counter.echo(tensor).result(10)
    echo = spawn("sample_actors:TensorEcho")
    try:
        (back,) = echo.echo(tensor).result(30)
        assert torch.equal(back, tensor) and back.stride() == tensor.stride() and back.dtype == torch.bfloat16
    finally:
        echo.kill()


@pytest.mark.timeout(60)  # the bug this guards against is a deadlock
@pytest.mark.parametrize("reader", ["a thread waiting in result()", "the runtime's loop"])
def test_a_done_callback_may_wait_for_another_call(counter: ActorHandle, reader: str) -> None:
    # The callback runs on the thread that reads the reply when that one waits in .result() (possibly on this
    # very socket), else on the callback thread: never on the loop, where .result() would block its own reply.
    seen: list[tuple[int, str]] = []
    first = counter.add(1)
    first.future.add_done_callback(
        lambda _: seen.append((counter.add(100).result(10), threading.current_thread().name))
    )
    if reader == "a thread waiting in result()":
        assert first.result(10) == 11
    wait_until(lambda: seen, "the callback's own call never finished")
    value, thread = seen[0]
    assert value == 111
    expected = {"miles-call-callbacks"} if reader == "the runtime's loop" else {"miles-call-callbacks", "MainThread"}
    assert thread in expected


def test_a_callback_that_raises_is_logged_and_later_callbacks_still_run(
    counter: ActorHandle, caplog: pytest.LogCaptureFixture
) -> None:
    def leave(_: object) -> None:
        raise SystemExit(3)

    seen: list[str] = []
    with caplog.at_level(logging.ERROR, logger="runtime.caller.call_future"):
        # Not done when the callbacks are added, and nobody waits: the loop reads the replies, the callback thread
        # runs the callbacks.
        counter.sleep(0.1).future.add_done_callback(leave)
        time.sleep(0.3)
        counter.sleep(0.1).future.add_done_callback(lambda _: seen.append(threading.current_thread().name))
        wait_until(lambda: seen, "the callback thread stopped after a callback raised")
    assert seen == ["miles-call-callbacks"]
    assert any("exception calling callback" in r.getMessage() for r in caplog.records)


def test_cancelling_the_future_gives_the_call_up_locally(counter: ActorHandle) -> None:
    slow = counter.sleep(0.3)
    assert slow.future.cancel() and slow.future.cancelled()
    with pytest.raises(concurrent.futures.CancelledError):
        slow.result(5)
    assert counter.add(1).result(10) == 11  # the same lane goes on once the given-up call is done


def test_same_host_calls_skip_tcp_unless_switched_off(
    counter: ActorHandle, monkeypatch: pytest.MonkeyPatch, no_leaks: None
) -> None:
    assert counter.add(1).result(10) == 11
    assert counter.endpoint.startswith("tcp://127.0.0.1:")  # what handles carry and other hosts would use
    assert counter.connection.transport_address == "ipc://@miles-tcp-" + counter.endpoint.removeprefix("tcp://")

    monkeypatch.setenv(local_twin.ENV, "0")  # the actor spawned now inherits it and binds no twin either
    plain = spawn(Counter, kwargs={"start": 0})
    try:
        assert plain.add(2).result(10) == 2
        assert plain.connection.transport_address == plain.endpoint
        assert local_twin.find(plain.endpoint) is None
    finally:
        plain.kill()


def test_a_waiting_caller_spins_only_right_after_a_result(
    counter: ActorHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread blocked in .result() polls the socket first (MILES_WAIT_SPIN_US) only if the actor answered within
    SPIN_AFTER_RESULT_S: an actor silent for longer is asleep, takes longer to wake than the spin lasts, and the
    spinning core is one its threads need (bench/README.md: a call after 0.5-50 ms of silence was 15-40% slower)."""
    assert wait_spin.WAIT_SPIN_S > 0
    spins: list[float] = []
    receive_here = ZmqEndpoint.receive_here

    def recording(self: ZmqEndpoint, timeout_s: float, waker: Any, *, spin_s: float = 0.0) -> None:
        spins.append(spin_s)
        receive_here(self, timeout_s, waker, spin_s=spin_s)

    monkeypatch.setattr(ZmqEndpoint, "receive_here", recording)
    monkeypatch.setattr(wait_spin, "SPIN_AFTER_RESULT_S", 60.0)  # "recently": whatever this machine's load
    assert counter.add(1).result(10) == 11
    assert spins and spins[0] == wait_spin.WAIT_SPIN_S
    monkeypatch.setattr(wait_spin, "SPIN_AFTER_RESULT_S", 0.05)
    time.sleep(0.2)
    spins.clear()
    assert counter.add(1).result(10) == 12
    assert spins and spins[0] == 0.0
