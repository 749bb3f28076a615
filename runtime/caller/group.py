"""Calls over many actors at once: ``ActorGroup(handles).step(x=1)`` calls every member and gathers results."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator, Sequence
from typing import Any

from runtime.caller.handle import ActorHandle, PendingCall
from runtime.core.errors import DeadlineExceeded


class GroupCall:
    """The calls of one broadcast; results come back in member order."""

    def __init__(self, calls: list[PendingCall]) -> None:
        self.calls = calls

    def __await__(self) -> Generator[Any, None, list[Any]]:
        return asyncio.gather(*(asyncio.wrap_future(call.future) for call in self.calls)).__await__()

    def result(self, timeout: float | None = None) -> list[Any]:
        """Every member's result; the first failure is raised (after all have finished or the timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return [call.result(None if deadline is None else max(0.0, deadline - time.monotonic())) for call in self.calls]


def gather(calls: Sequence[PendingCall], *, timeout: float | None = None) -> list[Any]:
    """Blocking wait for several calls; raises DeadlineExceeded naming how many were still pending."""
    try:
        return GroupCall(list(calls)).result(timeout)
    except DeadlineExceeded:
        pending = sum(1 for call in calls if not call.done())
        raise DeadlineExceeded(f"{pending} of {len(calls)} calls had no result within {timeout} s") from None


class _GroupMethod:
    def __init__(self, group: ActorGroup, name: str, deadline_s: float | None) -> None:
        self._group, self._name, self._deadline_s = group, name, deadline_s

    def options(self, *, deadline_s: float | None = None) -> _GroupMethod:
        return _GroupMethod(self._group, self._name, deadline_s)

    def __call__(self, *args: Any, **kwargs: Any) -> GroupCall:
        return GroupCall(
            [
                handle.method(self._name).options(deadline_s=self._deadline_s)(*args, **kwargs)
                for handle in self._group.handles
            ]
        )


class ActorGroup:
    """A list of handles addressed as one: ``group.method(...)`` broadcasts, ``group.map`` scatters."""

    def __init__(self, handles: Sequence[ActorHandle]) -> None:
        self.handles = list(handles)

    def __len__(self) -> int:
        return len(self.handles)

    def __getattr__(self, name: str) -> _GroupMethod:
        if name.startswith("_"):
            raise AttributeError(name)
        return _GroupMethod(self, name, None)

    def map(self, method: str, per_member: Sequence[dict[str, Any]]) -> GroupCall:
        """Call ``method`` on member i with keyword arguments ``per_member[i]``."""
        if len(per_member) != len(self.handles):
            raise ValueError(f"map({method!r}): {len(per_member)} argument sets for {len(self.handles)} members")
        return GroupCall([h.method(method)(**kw) for h, kw in zip(self.handles, per_member, strict=True)])

    def kill(self) -> None:
        for handle in self.handles:
            handle.kill()
