"""One call in flight from this process (:class:`Call`), and how it is settled: by its result, or by an error.

A call keeps its SUBMIT frames until it is settled, so that it can be resent (the actor dedupes by call id).
Whichever thread settles it first wins; a call whose caller gave it up (cancelled its future) is left as it is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from runtime.core.errors import CallSite, DeadlineExceeded, NotDelivered
from transport import shared_memory
from transport.codec import Buffer


@dataclass(slots=True, eq=False)
class Call:
    """One call in flight from this process."""

    call_id: bytes
    method: str
    payload: tuple[bytes, list[Buffer]]
    deadline: float | None  # unix seconds
    proof: bytes | None  # a control call's proof (runtime.core.control_auth), else None
    shared: list[str] = field(default_factory=list)  # shared-memory files holding arguments
    future: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)
    frames: list[Buffer] | None = None
    sent_at: float = 0.0
    polled_at: float = 0.0
    timer: asyncio.TimerHandle | None = None
    #: The incarnation the call is pinned to: set by a handle that does not follow restarts, else by the connection
    #: when it sends the SUBMIT (the one it knows then). The actor refuses a call pinned to another; only its reply is
    #: the result.
    boot_id: str | None = None

    def arm_deadline(self, expire: Callable[[Call], None]) -> None:
        """Call ``expire(self)`` when the deadline passes (once; on the running loop, which owns the timer)."""
        if self.deadline is not None and self.timer is None:
            loop = asyncio.get_running_loop()
            self.timer = loop.call_at(loop.time() + self.deadline - time.time(), expire, self)

    def settle(self, run_soon: Callable[[Callable[[], object]], None]) -> None:
        """The call is over for us: stop its timer, drop the shared-memory files holding its arguments; both
        through ``run_soon`` (which runs it on the loop, the timer's owner)."""
        if self.timer is not None:
            run_soon(self.timer.cancel)
        if self.shared:  # freeing a large file takes milliseconds: not on the waiting caller's time
            run_soon(partial(shared_memory.unlink, self.shared))


def set_result(future: concurrent.futures.Future[Any], value: Any) -> None:
    """Settle ``future`` unless its caller cancelled it (then nobody waits for it)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        future.set_result(value)


def set_exception(future: concurrent.futures.Future[Any], error: BaseException) -> None:
    """Fail ``future`` unless its caller cancelled it (then nobody waits for it)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        future.set_exception(error)


def deadline_passed(site: CallSite) -> DeadlineExceeded:
    return DeadlineExceeded("the deadline passed with no result; the call may still run on the actor", site=site)


def not_delivered(state: str, site: CallSite) -> NotDelivered:
    """The error for a call whose result the actor no longer holds (``state``: acked or expired)."""
    return NotDelivered(
        f"the actor reports this call's result as {state} before this caller received it "
        "(result_ttl_s too short, or the call id was reused)",
        site=site,
    )
