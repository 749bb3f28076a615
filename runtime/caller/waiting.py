"""``wait(calls, num_returns=1, timeout=None) -> (ready, pending)``: Ray's ``ray.wait`` for calls in flight."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Sequence
from typing import Any, Protocol


class _Waitable(Protocol):
    @property
    def future(self) -> concurrent.futures.Future[Any]: ...


def _check(calls: Sequence[_Waitable], num_returns: int, timeout: float | None) -> list[_Waitable]:
    calls = list(calls)
    if len({id(call) for call in calls}) != len(calls):
        raise ValueError("wait: the same call is listed twice")
    if not isinstance(num_returns, int) or isinstance(num_returns, bool) or not 1 <= num_returns <= max(1, len(calls)):
        raise ValueError(f"wait: num_returns must be an int in 1..{len(calls)} (how many calls), got {num_returns!r}")
    if timeout is not None and timeout < 0:
        raise ValueError(f"wait: timeout must be None (no limit) or >= 0 seconds, got {timeout!r}")
    return calls


def _still_waiting(
    calls: list[_Waitable], num_returns: int, deadline: float | None
) -> tuple[list[concurrent.futures.Future[Any]], float | None] | None:
    """(the futures not done yet, the seconds left) while waiting goes on; None once it is over."""
    if not calls or sum(call.future.done() for call in calls) >= num_returns:
        return None
    left = None if deadline is None else deadline - time.monotonic()
    if left is not None and left <= 0:
        return None
    return [call.future for call in calls if not call.future.done()], left


def _split(calls: list[_Waitable], num_returns: int) -> tuple[list[_Waitable], list[_Waitable]]:
    """(the first ``num_returns`` finished calls, in the order given; the rest, in the order given)."""
    ready = [call for call in calls if call.future.done()][:num_returns]
    chosen = {id(call) for call in ready}
    return ready, [call for call in calls if id(call) not in chosen]


def wait(
    calls: Sequence[_Waitable], *, num_returns: int = 1, timeout: float | None = None
) -> tuple[list[Any], list[Any]]:
    """Block until ``num_returns`` of ``calls`` (PendingCalls, or anything with a ``future``) have finished, or
    ``timeout`` seconds have passed; returns (ready, pending), each in the order given. A call that failed counts
    as finished (its ``result()`` raises). Not on the runtime's loop: use :func:`wait_async` there."""
    calls = _check(calls, num_returns, timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while (waiting := _still_waiting(calls, num_returns, deadline)) is not None:
        futures, left = waiting
        concurrent.futures.wait(futures, timeout=left, return_when=concurrent.futures.FIRST_COMPLETED)
    return _split(calls, num_returns)


async def wait_async(
    calls: Sequence[_Waitable], *, num_returns: int = 1, timeout: float | None = None
) -> tuple[list[Any], list[Any]]:
    """:func:`wait` for async code."""
    calls = _check(calls, num_returns, timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while (waiting := _still_waiting(calls, num_returns, deadline)) is not None:
        futures, left = waiting
        await asyncio.wait([asyncio.wrap_future(f) for f in futures], timeout=left, return_when=asyncio.FIRST_COMPLETED)
    return _split(calls, num_returns)
