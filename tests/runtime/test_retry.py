"""retry_until_deadline: retries safe errors with backoff, never sleeps past the deadline, chains the last error."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from runtime import DeadlineExceeded, NotDelivered, OverCapacity, retry_until_deadline, retry_until_deadline_async
from runtime.caller.retry import backoff_delays


def test_sync_retries_until_success() -> None:
    tries = []

    def attempt() -> str:
        tries.append(time.monotonic())
        if len(tries) < 4:
            raise OverCapacity("busy")
        return "done"

    assert retry_until_deadline(attempt, deadline_s=5, base_delay_s=0.01) == "done"
    assert len(tries) == 4
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert gaps[2] > gaps[0]  # backoff grows


def test_sync_gives_up_at_the_deadline_not_after() -> None:
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match=r"gave up after \d+ tries.*last error.*lost") as info:
        retry_until_deadline(lambda: (_ for _ in ()).throw(NotDelivered("lost")), deadline_s=0.5,
                                  base_delay_s=0.2, max_delay_s=5.0, what="push")  # fmt: skip
    elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 0.8 and isinstance(info.value.__cause__, NotDelivered)


def test_other_errors_are_not_retried() -> None:
    calls = []

    def attempt() -> None:
        calls.append(1)
        raise ValueError("bug")

    with pytest.raises(ValueError, match="bug"):
        retry_until_deadline(attempt, deadline_s=5)
    assert calls == [1]


def test_async_variant_and_jittered_delays() -> None:
    state = {"n": 0}

    async def attempt() -> int:
        state["n"] += 1
        if state["n"] < 3:
            raise ConnectionError("reset")
        return state["n"]

    assert asyncio.run(retry_until_deadline_async(attempt, deadline_s=5, base_delay_s=0.01)) == 3
    delay = backoff_delays(0.1, 1.0, 0.25)
    assert all(0.075 <= delay(1) <= 0.125 for _ in range(50))
    assert all(0.75 <= delay(10) <= 1.25 for _ in range(50))


def test_the_blocking_retry_refuses_a_coroutine_it_could_not_retry() -> None:
    """An async attempt given to the blocking retry would fail only when awaited, past every retry."""

    async def attempt() -> int:
        raise NotDelivered("lost")

    with pytest.raises(TypeError, match=r"rpc: .*use `await retry_until_deadline_async"):
        retry_until_deadline(attempt, deadline_s=5, what="rpc")
