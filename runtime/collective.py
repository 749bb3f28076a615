"""Collective groups of actors: one call makes a torch.distributed group of them, by name.

    from runtime import collective

    group = collective.create_group([a, b, c], backend="gloo", name="weights")   # ranks by handle order
    # inside a member's method:
    pg = collective.get_group("weights"); dist.all_reduce(t, group=pg)
    ref = runtime.put({"w": w}, transport="collective")     # device-resident ref (runtime.tensors.tensor_refs)
    collective.wait_freed([ref], timeout=60)                # the owner may reuse w now
    collective.destroy_group(group)                         # from anywhere holding the handles

Members are actors (a driver is not one); torch is imported only in the members.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from runtime.caller.handle import ActorHandle, PendingCall
from runtime.core.errors import ActorDied, ActorError
from runtime.objects.tensor_put import wait_freed
from runtime.tensors.collective_groups import (
    BACKENDS,
    CollectiveError,
    GroupMember,
    check_group_options,
    get_group,
    group_names,
    member,
    new_process_group,
)
from runtime.tensors.net_routes import interface_towards
from runtime.tensors.tensor_specs import torch_dtype

__all__ = [
    "BACKENDS",
    "CollectiveError",
    "CollectiveGroup",
    "GroupMember",
    "create_group",
    "destroy_group",
    "get_group",
    "group_names",
    "interface_towards",
    "member",
    "new_process_group",
    "torch_dtype",
    "wait_freed",
]

log = logging.getLogger(__name__)

POLL_S = 0.005
LEAVE_S = 10.0


@dataclass(frozen=True)
class CollectiveGroup:
    """A group made by :func:`create_group`: its name, backend and members by rank."""

    name: str
    backend: str
    handles: tuple[ActorHandle, ...]

    @property
    def world_size(self) -> int:
        return len(self.handles)

    def rank_of(self, handle: ActorHandle) -> int:
        for rank, member_handle in enumerate(self.handles):
            if member_handle.endpoint == handle.endpoint:
                return rank
        raise ValueError(f"{handle.actor_name} is not a member of collective group {self.name!r}")


def create_group(
    handles: Sequence[ActorHandle], backend: str = "gloo", name: str = "default", timeout_s: float = 60.0
) -> CollectiveGroup:
    """Make ``handles`` one collective group ``name`` (rank ``i`` is ``handles[i]``); returns once all joined.

    As Ray's ``ray.experimental.collective.create_collective_group`` (``python/ray/experimental/collective/
    collective.py``) and ``ray.util.collective.create_collective_group``. The rendezvous: rank 0 keeps the group's
    keys (``__collective_open__``; no port of its own: members reach them over the actor transport,
    :mod:`runtime.tensors.collective_store`), then every member joins as its rank (``__collective_join__``, on its
    collective lane, so a member busy in a method still joins). Waits at most ``timeout_s``; a member that dies or
    refuses fails it at once with :class:`CollectiveError` naming the member, one that never joins fails it at the
    deadline naming the members that had not joined; the members that did join leave again."""
    handles = tuple(handles)
    check_group_options(name, backend, len(handles), timeout_s)
    endpoints = [handle.endpoint for handle in handles]
    if len(set(endpoints)) != len(endpoints):
        twice = sorted({e for e in endpoints if endpoints.count(e) > 1})
        raise ValueError(f"collective group {name!r}: an actor may hold one rank only; given twice: {twice}")
    deadline = time.monotonic() + timeout_s
    group = CollectiveGroup(name, backend, handles)
    opening = handles[0].method("__collective_open__").options(deadline_s=timeout_s)(name, len(handles), timeout_s)
    _wait_all(group, {0: opening}, deadline, "host the rendezvous of", set())
    host = _reachable_host(handles[0])
    joins = {
        rank: handle.method("__collective_join__").options(deadline_s=timeout_s)(
            name, backend, rank, len(handles), host, timeout_s, list(handles)
        )
        for rank, handle in enumerate(handles)
    }
    joined: set[int] = set()
    try:
        _wait_all(group, joins, deadline, "join", joined)
    except BaseException:
        _leave(group, ranks=joined | {0}, quiet=True)  # rank 0 hosts the store either way
        raise
    log.info("collective group %s (%s): %d members, rank 0 on %s", name, backend, len(handles), host)
    return group


def destroy_group(group: CollectiveGroup) -> None:
    """Every member leaves ``group`` (a dead member is skipped); the name may be used again afterwards. As Ray's
    ``ray.experimental.collective.destroy_collective_group``."""
    _leave(group, ranks=set(range(group.world_size)), quiet=False)


def _wait_all(
    group: CollectiveGroup, calls: dict[int, PendingCall], deadline: float, what: str, done: set[int]
) -> None:
    """Wait for every call (adding the ranks that succeeded to ``done``); the first failure raises at once naming
    its member, the deadline names the rest."""
    pending = dict(calls)
    while pending:
        for rank, call in list(pending.items()):
            if not call.done():
                continue
            del pending[rank]
            try:
                call.result()
                done.add(rank)
            except ActorDied as exc:
                raise CollectiveError(
                    f"collective group {group.name!r}: member {_who(group, rank)} died before it could {what} "
                    f"the group: {exc}"
                ) from exc
            except ActorError as exc:
                raise CollectiveError(
                    f"collective group {group.name!r}: member {_who(group, rank)} could not {what} the group: {exc}"
                ) from exc
        if pending and time.monotonic() > deadline:
            late = ", ".join(_who(group, rank) for rank in sorted(pending))
            raise CollectiveError(
                f"collective group {group.name!r}: {late} did not {what} the group within its timeout "
                f"({len(calls) - len(pending)} of {len(calls)} did); is each member alive and reachable from "
                f"{group.handles[0].actor_name}'s host?"
            )
        time.sleep(POLL_S)


def _leave(group: CollectiveGroup, *, ranks: set[int], quiet: bool) -> None:
    """Members ``ranks`` leave the group, all at once, within LEAVE_S (a dead or hung one is logged, unless quiet)."""
    calls = [(rank, group.handles[rank].method("__collective_leave__").options(deadline_s=LEAVE_S)(group.name))
             for rank in sorted(ranks) if not group.handles[rank].dead]  # fmt: skip
    deadline = time.monotonic() + LEAVE_S
    for rank, call in calls:
        try:
            call.result(timeout=max(0.0, deadline - time.monotonic()))
        except (ActorError, TimeoutError) as exc:
            if not quiet:
                log.warning("member %s did not leave group %s: %s", _who(group, rank), group.name, exc)


def _who(group: CollectiveGroup, rank: int) -> str:
    handle = group.handles[rank]
    return f"{handle.actor_name} (rank {rank}, pid {handle.pid} on {handle.host})"


def _reachable_host(handle: ActorHandle) -> str:
    """Rank 0's host as its peers reach it: the host of its endpoint (the address its handle dials)."""
    rest = handle.endpoint.partition("://")[2]
    host = rest.rpartition(":")[0].strip("[]")
    return host if host and host not in ("0.0.0.0", "*", "::") else handle.host
