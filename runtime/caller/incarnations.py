"""An actor's incarnations as a caller sees them: which are gone, the errors for calls pinned to one, the current one
(a restarted actor keeps its endpoint but is a new process with a new boot id, an incarnation)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from runtime.caller.call import Call
from runtime.core.errors import ActorDied, ActorRestarted, CallSite, DeadlineExceeded

#: How a handle pinned to an incarnation that is gone moves on (said in every refusal of its calls).
MOVE_ON = (
    "a handle stays pinned to its incarnation (only the one spawn() returned follows restarts); call "
    "handle.follow_restart() (or get a fresh handle: get_actor, connect) to call the new one"
)
#: Past incarnations remembered per connection (an actor restarted more often refuses the older pins itself).
MAX_REMEMBERED = 256


def lost_in_flight(old: str, new: str) -> str:
    """Why calls in flight to incarnation ``old`` failed when ``new`` answered (they may have run on ``old``)."""
    return f"the actor restarted (boot id {old} → {new}); calls in flight were lost; {MOVE_ON}"


def refused_reply(call: Call, boot_id: str, site: CallSite) -> ActorRestarted:
    """The error for a reply from incarnation ``boot_id`` to a call pinned to another: never taken as its result
    (an actor runs no call pinned to another incarnation: its reply is that refusal)."""
    return ActorRestarted(
        f"the reply came from incarnation {boot_id}, but the call was sent to incarnation {call.boot_id}: "
        f"the actor restarted, so its reply was refused and the call did not run there; {MOVE_ON}",
        site=site,
    )


def pinned_to_gone(call: Call, boot_id: str | None, site: CallSite) -> ActorRestarted:
    """The error for a call pinned to an incarnation known to be gone (``boot_id``: the one that answers now)."""
    now = f" (now {boot_id})" if boot_id is not None and boot_id != call.boot_id else ""
    return ActorRestarted(
        f"the actor restarted: this handle is pinned to incarnation {call.boot_id}, which is gone{now}; "
        f"the call was not sent; {MOVE_ON}",
        site=site,
    )


class GoneIncarnations:
    """Boot ids known to be gone, the ``MAX_REMEMBERED`` most recent. Read on any thread, changed under the
    connection's lock.

    A handle that does not follow restarts pins each call to the incarnation it reached (``Call.boot_id``); the
    actor refuses a SUBMIT pinned to another (:mod:`runtime.actor.call_routing`), and a connection that has seen the
    incarnation go (here) refuses such a call without sending it. The handle moves on when its holder asks
    (``ActorHandle.follow_restart``), to the incarnation :func:`current_incarnation` finds."""

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: dict[str, None] = {}  # insertion-ordered: the oldest is dropped first

    def add(self, boot_id: str | None) -> None:
        if boot_id is not None and boot_id not in self._ids:
            self._ids[boot_id] = None
            if len(self._ids) > MAX_REMEMBERED:
                del self._ids[next(iter(self._ids))]

    def __contains__(self, boot_id: object) -> bool:
        return boot_id in self._ids


async def current_incarnation(
    ask_health: Callable[[float], Awaitable[Any]], actor: str, endpoint: str, server_key: str | None, deadline_s: float
) -> dict[str, Any]:
    """The ``__health__`` record of the incarnation of ``actor`` constructed at ``endpoint`` now, asked with
    ``ask_health(seconds left)``, waiting up to ``deadline_s`` for one to be constructed. ``ActorDied`` if another
    actor (another name, or CURVE key) or something else answers there; ``DeadlineExceeded`` if none is in time."""
    until = time.monotonic() + deadline_s
    late = (
        f"actor {actor!r}: no incarnation of it answered constructed at {endpoint} within {deadline_s} s "
        "(it is gone, or a restart is still under way: call follow_restart again)"
    )
    while True:
        left = until - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded(late)
        try:
            health = await ask_health(left)
        except DeadlineExceeded:
            raise DeadlineExceeded(late) from None
        if not _is_health(health):
            raise ActorDied(f"actor {actor!r}: what answers at {endpoint} is not an actor of this runtime any more")
        if health.get("constructed") is True:
            break
        await asyncio.sleep(min(0.1, left))
    if health.get("name") != actor or (server_key and health.get("server_key") != server_key):
        raise ActorDied(
            f"actor {actor!r} is gone: actor {health.get('name')!r} serves at {endpoint} now (the address was "
            "reused); get a handle to that one if it is the one you want"
        )
    return health


def _is_health(record: object) -> bool:
    """Whether ``record`` (off the network) has the fields of a ``__health__`` record a handle takes, typed."""
    fields = {"boot_id": (str,), "pid": (int,), "host": (str,), "name": (str,), "metrics_port": (int, type(None))}
    return type(record) is dict and all(type(record.get(key)) in kinds for key, kinds in fields.items())
