"""transport.timeouts.within: a deadline on an await that never loses a cancel.

The race it closes is CPython's gh-86296 (bpo-42130): asyncio.wait_for of 3.10/3.11 returns the result when the
awaited thing finishes in the same loop turn as a cancel of the waiter. The async rollout's producer loop waits
on an event with a timeout and is stopped by a cancel while its finishing groups set that event: with wait_for the
stop hung (CI, test_async_rollout::test_max_staleness_zero_waits_like_the_synchronous_loop)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from transport.timeouts import within


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


async def _stop_a_loop_whose_event_fires_with_the_cancel(wait) -> str:  # type: ignore[no-untyped-def]
    event = asyncio.Event()

    async def loop() -> str:
        for _ in range(3):
            try:
                await wait(event.wait(), 1.0)
            except TimeoutError:
                pass
            event.clear()
        return "ran on after its cancel"

    task = asyncio.create_task(loop())
    await asyncio.sleep(0.01)
    event.set()  # the event and the cancel land in the same loop turn
    task.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        return "cancelled"


def test_a_cancel_that_lands_with_the_result_is_not_lost() -> None:
    assert run(_stop_a_loop_whose_event_fires_with_the_cancel(within)) == "cancelled"


def test_wait_for_of_this_python_loses_it_which_is_why_it_is_banned() -> None:
    lost = run(_stop_a_loop_whose_event_fires_with_the_cancel(asyncio.wait_for))  # noqa: TID251
    assert lost == ("cancelled" if sys.version_info >= (3, 12) else "ran on after its cancel")


def test_result_error_and_timeout() -> None:
    async def body() -> None:
        assert await within(asyncio.sleep(0, "r"), 1.0) == "r"
        assert await within(asyncio.sleep(0, "r"), None) == "r"

        async def boom() -> None:
            raise ValueError("boom")

        with pytest.raises(ValueError, match="boom"):
            await within(boom(), 1.0)
        slow = asyncio.ensure_future(asyncio.sleep(10))
        with pytest.raises(TimeoutError, match=r"no result within 0\.05 s"):
            await within(slow, 0.05)
        assert slow.cancelled()  # what timed out does not run on

    run(body())


def test_a_lock_taken_in_the_turn_of_the_cancel_is_given_back() -> None:
    async def body() -> None:
        lock = asyncio.Lock()
        await lock.acquire()

        async def taker() -> None:
            await within(lock.acquire(), 5.0, on_dropped=lambda _: lock.release())

        task = asyncio.create_task(taker())
        await asyncio.sleep(0.01)
        lock.release()  # the waiting acquire is granted ...
        await asyncio.sleep(0)  # ... and completes in this turn
        task.cancel()  # while its waiter is cancelled
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not lock.locked()

    run(body())


def test_a_result_that_comes_while_a_timed_out_wait_is_cancelled_is_given_to_on_dropped() -> None:
    async def body() -> None:
        dropped: list[str] = []

        async def stubborn() -> str:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:  # takes a while to end, then ends with a result after all
                await asyncio.sleep(0.2)
                return "late"
            return "never"

        waiter = asyncio.create_task(within(stubborn(), 0.01, on_dropped=dropped.append))
        await asyncio.sleep(0.1)  # timed out: within waits for stubborn to end its cancel
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert dropped == ["late"]

    run(body())
