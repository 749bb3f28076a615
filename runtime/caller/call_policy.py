"""What a handle adds to every call it makes: a deadline per call, and the error a call that did not get through
raises (a service's own, naming its endpoint and the fix, instead of the runtime's ActorDied or DeadlineExceeded)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runtime.core.errors import ActorDied, DeadlineExceeded, NotDelivered

#: What a call that did not get through raises (a policy's ``unavailable`` turns it into its own error).
NOT_ANSWERED = (ActorDied, DeadlineExceeded, NotDelivered)


@dataclass(frozen=True)
class CallPolicy:
    """``deadline_s(method, kwargs)``: the deadline (s) of a call that names none (``.options(deadline_s=...)``
    still wins); ``unavailable(method, exc)``: what a call that did not get through raises instead of ``exc``.
    The actor's own refusals (RemoteError, CallRejected) pass as they are."""

    deadline_s: Callable[[str, dict[str, Any]], float]
    unavailable: Callable[[str, Exception], Exception]
