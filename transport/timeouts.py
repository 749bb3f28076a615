"""Await with a deadline without losing a cancel (``asyncio.wait_for`` of Python 3.10/3.11 can lose one)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


# asyncio.wait_for in 3.10 and 3.11 returns the result when the awaited thing finishes in the same loop turn as a
# cancel of the waiting task: the cancel is lost and a loop that `while True: wait_for(event.wait(), t)` runs on
# after its stopper cancelled it. asyncio.wait never swallows a cancel, so this helper is built on it.
async def within(
    awaitable: Awaitable[T], timeout_s: float | None, *, on_dropped: Callable[[T], object] | None = None
) -> T:
    """``await awaitable`` for at most ``timeout_s`` seconds (``None``: no limit); on timeout it is cancelled and
    the builtin ``TimeoutError`` raised; a cancel of the caller cancels it too and is always raised, and a result
    that came in the same turn is given to ``on_dropped`` (a lock just taken is released there)."""
    task = asyncio.ensure_future(awaitable)
    timed_out = False
    try:
        done, _ = await asyncio.wait({task}, timeout=None if timeout_s is None else max(0.0, timeout_s))
        if not done:
            timed_out = True
            task.cancel()
            await asyncio.wait({task})  # it may finish with a result instead: then that result stands
            if task.cancelled():
                raise TimeoutError(f"no result within {timeout_s} s")
    except asyncio.CancelledError:  # while waiting for it, or for it to end after a timeout
        if not timed_out:  # else it has its cancel already: a second would cut short how it ends
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):  # a second cancel: the first is raised all the same
            await asyncio.wait({task})
        if task.done() and not task.cancelled() and task.exception() is None and on_dropped is not None:
            on_dropped(task.result())
        _settle(task)
        raise
    return task.result()


def _settle(task: asyncio.Future[object]) -> None:
    """Mark the outcome of an abandoned task as seen (asyncio logs an exception nobody retrieved)."""
    if task.done() and not task.cancelled():
        task.exception()
