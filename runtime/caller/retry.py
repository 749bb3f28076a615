"""``retry_until_deadline`` (and ``retry_until_deadline_async``, whose ``attempt`` returns an awaitable): retry a call
with exponential backoff and jitter, never sleeping past the deadline."""

from __future__ import annotations

import asyncio
import inspect
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from runtime.core.errors import DeadlineExceeded, NotDelivered, OverCapacity, RemoteError

T = TypeVar("T")

#: Errors after which trying again is safe and may succeed. ConnectionError means this process's own connection
#: failed: a method that ran on an actor and raised ConnectionError there (a RemoteError that is also one, see
#: runtime.core.errors) is not retried by default, since trying again would run it again.
RETRYABLE: tuple[type[BaseException], ...] = (NotDelivered, OverCapacity, ConnectionError)


def backoff_delays(base_s: float, max_s: float, jitter: float) -> Callable[[int], float]:
    """Delay before attempt ``n`` (1-based): ``base·2^(n-1)`` capped at ``max_s``, ±``jitter`` fraction."""

    def delay(attempt: int) -> float:
        raw = min(max_s, base_s * 2 ** (attempt - 1))
        return max(0.0, raw * (1 + random.uniform(-jitter, jitter)))

    return delay


class RetryClock:
    """Counts tries and says how long to sleep before the next one, or raises once the deadline has passed."""

    def __init__(
        self,
        deadline_s: float,
        what: str,
        base_delay_s: float,
        max_delay_s: float,
        jitter: float,
        max_tries: int | None = None,
    ) -> None:
        if max_tries is not None and (not isinstance(max_tries, int) or isinstance(max_tries, bool) or max_tries < 1):
            raise ValueError(f"{what}: max_tries must be an int >= 1 (or None: bounded by the deadline only)")
        self.max_tries = max_tries
        self.deadline_s = deadline_s
        self.deadline = time.monotonic() + deadline_s
        self.what = what
        self.delay = backoff_delays(base_delay_s, max_delay_s, jitter)
        self.tries = 0

    def pause_after(self, exc: BaseException) -> float:
        """Seconds to sleep after try ``self.tries`` failed with ``exc``; never past the deadline. Raises ``exc``
        itself once ``max_tries`` tries have failed."""
        if self.max_tries is not None and self.tries >= self.max_tries:
            exc.add_note(f"{self.what}: gave up after {self.tries} tries (max_tries={self.max_tries})")
            raise exc
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded(
                f"{self.what}: gave up after {self.tries} tries in {self.deadline_s} s; last error: {exc}"
            ) from exc
        return min(self.delay(self.tries), left)


def retry_until_deadline(
    attempt: Callable[[], T],
    *,
    deadline_s: float,
    what: str = "call",
    retry_on: tuple[type[BaseException], ...] = RETRYABLE,
    base_delay_s: float = 0.05,
    max_delay_s: float = 2.0,
    jitter: float = 0.25,
    max_tries: int | None = None,
) -> T:
    """Call ``attempt()`` until it succeeds, retrying on ``retry_on`` until ``deadline_s`` seconds have passed or
    ``max_tries`` attempts have failed (None: no bound but the deadline).

    The last error is chained to the DeadlineExceeded raised at the deadline; after ``max_tries`` failures the last
    error itself is raised, as it is (with a note saying so), as a caller that catches the error type expects. A
    sleep is cut short at the deadline.
    """
    clock = RetryClock(deadline_s, what, base_delay_s, max_delay_s, jitter, max_tries)
    while True:
        clock.tries += 1
        try:
            result = attempt()
        except retry_on as exc:
            _raise_if_it_ran(exc, retry_on)
            time.sleep(clock.pause_after(exc))
            continue
        if inspect.iscoroutine(result):  # its errors would come when awaited, past every retry: a silent non-retry
            result.close()
            raise TypeError(
                f"{what}: retry_until_deadline got a coroutine from attempt(); in async code use "
                "`await retry_until_deadline_async(attempt, ...)`"
            )
        return result


async def retry_until_deadline_async(
    attempt: Callable[[], Awaitable[T]],
    *,
    deadline_s: float,
    what: str = "call",
    retry_on: tuple[type[BaseException], ...] = RETRYABLE,
    base_delay_s: float = 0.05,
    max_delay_s: float = 2.0,
    jitter: float = 0.25,
    max_tries: int | None = None,
) -> T:
    """:func:`retry_until_deadline` for async code: awaits ``attempt()``, and sleeps without blocking the loop."""
    clock = RetryClock(deadline_s, what, base_delay_s, max_delay_s, jitter, max_tries)
    while True:
        clock.tries += 1
        try:
            return await attempt()
        except retry_on as exc:
            _raise_if_it_ran(exc, retry_on)
            await asyncio.sleep(clock.pause_after(exc))


def _raise_if_it_ran(exc: BaseException, retry_on: tuple[type[BaseException], ...]) -> None:
    """With the default ``retry_on``, a failure raised by the method itself on the actor is final."""
    if retry_on is RETRYABLE and isinstance(exc, RemoteError):
        raise exc
