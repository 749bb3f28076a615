"""While an owner waits for its refs' readers: whether a member of a ref's group died meanwhile, since a dead
reader never frees its ref and ``collective.wait_freed`` would otherwise wait out its whole timeout."""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from runtime.core.errors import ActorDied
from runtime.tensors import collective_groups
from runtime.tensors.collective_groups import CollectiveError

if TYPE_CHECKING:
    from runtime.caller.handle import ActorHandle
    from runtime.tensors.tensor_store import TensorEntry

PROBE_EVERY_S = 1.0


class MemberWatch:
    """The liveness of the members of held refs' groups, for one ``wait_freed``; not thread-safe (one waiter).

    :func:`runtime.objects.tensor_put.wait_freed` hands it to the store, which asks it every ``TensorStore.WATCH_S``
    while refs are held: a member of a held ref's group (other than the owner) known dead fails the wait with
    ActorDied naming it (actor, rank, pid, host) and the ref. Liveness is the runtime's own
    (:mod:`runtime.caller.link_liveness`): each watched member has one ``__health__`` call in flight (answered on
    its control lane, even while a long method runs), renewed every ``PROBE_EVERY_S``; its connection's link watch
    fails it when the process is gone (refused reconnects: well under a second), its heartbeats when the member
    stays silent past ``liveness_timeout_s``. Only a waiting ``wait_freed`` probes: ordinary calls pay nothing."""

    def __init__(self) -> None:
        self._probes: dict[str, tuple[float, Future[Any]]] = {}  # endpoint -> (sent at, its __health__ answer)

    def dead_member(self, key: str, entry: TensorEntry) -> ActorDied | None:
        """ActorDied naming a dead member of ``entry``'s group (one that pulled the ref first), or None."""
        try:
            member = collective_groups.member(entry.group)
        except CollectiveError:
            return None  # this process left the group: nobody is left to watch
        ranks = sorted(set(range(member.world_size)) - {member.rank}, key=lambda rank: rank not in entry.pulled_by)
        for rank in ranks:
            handle = member.members[rank]
            reason = self._dead(handle)
            if reason is not None:
                pulled = " (it had pulled the ref)" if rank in entry.pulled_by else ""
                return ActorDied(
                    f"tensor ref {key}: member {member.peer_name(rank)}, pid {handle.pid} on {handle.host}, of "
                    f"collective group {entry.group!r} died while the ref still waited for {entry.readers_left} "
                    f"reader(s){pulled}; the group is broken: destroy it and make a new one ({reason})"
                )
        return None

    def _dead(self, handle: ActorHandle) -> str | None:
        """Why ``handle``'s actor is known dead, or None; keeps one ``__health__`` call in flight to it."""
        if handle.dead is not None:
            return handle.dead
        now = time.monotonic()
        probe = self._probes.get(handle.endpoint)
        if probe is not None:
            sent_at, answer = probe
            if not answer.done():
                return None
            error = answer.exception(timeout=0)  # done: never blocks
            if isinstance(error, ActorDied):
                return str(error)
            if now - sent_at < PROBE_EVERY_S:
                return None
        # Any other answer (or the probe's own deadline) is not a death. The deadline outlasts the liveness
        # timeout, so a silent member is judged by its connection's heartbeats.
        deadline_s = handle.liveness_timeout_s + PROBE_EVERY_S
        self._probes[handle.endpoint] = (now, handle.method("__health__").options(deadline_s=deadline_s)().future)
        return None
