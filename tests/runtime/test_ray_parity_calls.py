"""Ray parity: remote exceptions caught as their own type, threaded actors, a loop per concurrency group, per-call
groups, cancel, wait, put in a driver, bounded retries.

Ray sources read: python/ray/exceptions.py (RayTaskError.as_instanceof_cause: a class deriving from both
RayTaskError and the cause's class), python/ray/actor.py (max_concurrency: threads of a threaded actor, coroutines
of an async actor; concurrency_groups and ``method.options(concurrency_group=...)``), python/ray/_private/worker.py
(``wait(refs, *, num_returns=1, timeout=None) -> (ready, not_ready)``, ``put``, ``cancel``),
python/ray/tests/test_concurrency_group.py and test_cancel.py (a queued actor task never runs; a running async one
sees CancelledError). Real actor processes throughout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Iterator

import numpy as np
import pytest
from ray_parity_actors import ParityError

from runtime import (
    ActorHandle,
    CallRejected,
    NotDelivered,
    RemoteError,
    put,
    retry_until_deadline,
    retry_until_deadline_async,
    spawn,
    wait,
)
from runtime.caller.client import ClientRuntime

pytestmark = pytest.mark.processes


@pytest.fixture
def groups(no_leaks: None) -> Iterator[ActorHandle]:
    handle = spawn("ray_parity_actors:AsyncGroups")
    try:
        yield handle
    finally:
        handle.kill()


def test_a_remote_exception_is_caught_as_its_own_type_and_keeps_the_remote_details(no_leaks: None) -> None:
    raiser = spawn("ray_parity_actors:Raiser", name="parity-raiser")
    try:
        with pytest.raises(ValueError, match="bad input") as info:
            raiser.value_error("bad input").result(10)
        error = info.value
        assert isinstance(error, RemoteError) and error.remote_type == "builtins.ValueError"
        assert "raise ValueError(text)" in error.remote_traceback  # the actor's own traceback
        assert error.site.actor == "parity-raiser" and error.site.method == "value_error" and error.site.host
        with pytest.raises(ParityError) as own:  # a class of the user's, with its own constructor
            raiser.parity_error(7).result(10)
        assert "code 7: from the actor" in str(own.value) and isinstance(own.value, RemoteError)
        with pytest.raises(KeyError):
            raiser.key_error("k").result(10)
    finally:
        raiser.kill()


def test_max_concurrency_runs_sync_calls_of_a_threaded_actor_in_parallel(no_leaks: None) -> None:
    sleeper = spawn("ray_parity_actors:Sleeper", max_concurrency=4)
    serial = spawn("ray_parity_actors:Sleeper")
    try:
        started = time.monotonic()
        threads = {call.result(20) for call in [sleeper.nap(1.0) for _ in range(4)]}
        assert time.monotonic() - started < 3.0  # four 1 s naps side by side, not 4 s in a row
        assert len(threads) == 4
        started = time.monotonic()
        assert {call.result(20) for call in [serial.nap(0.5) for _ in range(3)]} == {"lane-default-0"}
        assert time.monotonic() - started >= 1.5  # the default: one at a time
    finally:
        sleeper.kill()
        serial.kill()


def test_each_concurrency_group_has_its_own_event_loop(groups: ActorHandle) -> None:
    blocked = groups.block(3.0)  # blocks the "slow" group's loop with a sync sleep inside a coroutine
    time.sleep(0.3)
    started = time.monotonic()
    assert groups.quick().result(5) == "group-loop-fast"  # another group: not stalled
    assert groups.where().result(5) == "group-loop-default"
    assert groups.control_thread().result(5) == "MainThread"  # the control lane and the socket reader
    assert groups.method("__health__")().result(5)["constructed"]
    assert time.monotonic() - started < 2.0
    assert not blocked.done()
    assert blocked.result(10) == "group-loop-slow"


def test_options_concurrency_group_picks_the_group_per_call(groups: ActorHandle) -> None:
    assert groups.where.options(concurrency_group="fast")().result(5) == "group-loop-fast"
    assert groups.where().result(5) == "group-loop-default"  # the option is per MethodRef, not sticky
    with pytest.raises(CallRejected, match="no concurrency group 'nope'"):
        groups.where.options(concurrency_group="nope")().result(5)


def test_cancel_a_queued_call_never_runs_it(no_leaks: None) -> None:
    sleeper = spawn("ray_parity_actors:Sleeper")
    try:
        busy = sleeper.nap(1.5)  # holds the only default-lane thread
        queued = [sleeper.mark(i) for i in range(3)]
        assert queued[1].cancel()
        with pytest.raises(concurrent.futures.CancelledError):
            queued[1].result(5)
        busy.result(10)
        queued[2].result(10)
        assert sleeper.marks().result(5) == [0, 2]  # 1 never ran
        assert not busy.cancel()  # already finished: nothing to cancel
    finally:
        sleeper.kill()


def test_cancel_a_running_async_call_raises_cancelled_error_in_its_coroutine(groups: ActorHandle) -> None:
    running = groups.sleep_until_cancelled("a", 30.0)
    time.sleep(0.5)
    assert running.cancel()
    with pytest.raises(concurrent.futures.CancelledError):
        running.result(5)
    deadline = time.monotonic() + 5
    while groups.cancelled_tags().result(5) != ["a"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert groups.cancelled_tags().result(5) == ["a"]

    async def awaited() -> None:
        call = groups.sleep_until_cancelled("b", 30.0)
        await asyncio.sleep(0.5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(awaited())
    assert groups.where().result(5) == "group-loop-default"  # the actor goes on serving


def test_wait_returns_ready_and_pending(no_leaks: None) -> None:
    sleeper = spawn("ray_parity_actors:Sleeper", max_concurrency=3)
    try:
        calls = [sleeper.nap(2.0), sleeper.nap(0.1), sleeper.nap(2.0)]
        ready, pending = wait(calls, num_returns=1, timeout=10)
        assert ready == [calls[1]] and pending == [calls[0], calls[2]]
        ready, pending = wait(calls, num_returns=3, timeout=0.2)  # the timeout passes first
        assert ready == [calls[1]] and len(pending) == 2
        ready, pending = wait(calls, num_returns=3)
        assert ready == calls and pending == []
        with pytest.raises(ValueError, match="num_returns"):
            wait(calls, num_returns=4)
    finally:
        sleeper.kill()


def test_put_in_the_driver_is_served_to_actors(no_leaks: None) -> None:
    value = {"tokens": np.arange(1000, dtype=np.int64), "tag": "driver"}
    ref = put(value)
    assert ref.owner.actor_name.startswith("driver-")
    relay = spawn("ray_parity_actors:RefReader")
    try:
        assert relay.total(ref).result(10) == int(value["tokens"].sum())
        assert ref.get()["tag"] == "driver"
        assert ref.free() and not ref.free()
    finally:
        relay.kill()


def test_retry_until_deadline_bounds_tries(no_leaks: None) -> None:
    tries = []

    def attempt() -> int:
        tries.append(time.monotonic())
        raise NotDelivered("not yet")

    with pytest.raises(NotDelivered) as info:
        retry_until_deadline(attempt, deadline_s=60, max_tries=3, base_delay_s=0.01)
    assert len(tries) == 3 and "gave up after 3 tries (max_tries=3)" in "".join(info.value.__notes__)

    async def attempt_async() -> int:
        tries.append(time.monotonic())
        raise NotDelivered("not yet")

    tries.clear()
    with pytest.raises(NotDelivered):
        ClientRuntime.get().run(
            retry_until_deadline_async(attempt_async, deadline_s=60, max_tries=2, base_delay_s=0.01),
            timeout_s=10,
            what="retry",
        )
    assert len(tries) == 2
    with pytest.raises(ValueError, match="max_tries"):
        retry_until_deadline(attempt, deadline_s=1, max_tries=0)


def test_a_method_that_raised_connection_error_is_not_run_again_by_default(no_leaks: None) -> None:
    """A remote ConnectionError is caught as ConnectionError (dual class), but it means the method ran and failed on
    the actor: the default retry_on (for this process's own connection failures) must not run it again; naming
    the error type explicitly does (as Ray's retry_exceptions is opt-in, python/ray/actor.py)."""
    raiser = spawn("ray_parity_actors:Raiser")
    try:
        with pytest.raises(ConnectionError, match="attempt 1"):
            retry_until_deadline(lambda: raiser.connection_error().result(timeout=10), deadline_s=5)
        assert raiser.connection_errors_seen().result(timeout=10) == 1
        with pytest.raises(ConnectionError):
            retry_until_deadline(
                lambda: raiser.connection_error().result(timeout=10),
                deadline_s=60,
                max_tries=3,
                base_delay_s=0.01,
                retry_on=(ConnectionError,),
            )
        assert raiser.connection_errors_seen().result(timeout=10) == 4
    finally:
        raiser.kill()
