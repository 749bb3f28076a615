"""A started worker's state machine: the states and, in one table, the moves between them."""

from __future__ import annotations

from enum import Enum


class WorkerState(str, Enum):
    """Where a worker is in its start and life; a str, so it is shown as its value (the provider API and the state
    file show these strings)."""

    PENDING = "pending"  # registered; its spawn is sent
    SPAWNED = "spawned"  # the agent started its process
    READY = "ready"  # its readiness check passed (a serve worker: its ready line)
    CONSTRUCTING = "constructing"  # a serve worker's actor is being constructed (the console counts them)
    ATTACHED = "attached"  # a serve worker's actor is constructed and its handle attached
    FAILED = "failed"  # its start failed (spawn, readiness, ready line or attach); the error says why
    EXITED = "exited"  # its process exited, or its host's agent was lost

    def __str__(self) -> str:
        return self.value

    def can_become(self, new: WorkerState) -> bool:
        """Whether the table allows moving from this state to ``new`` (staying is always allowed)."""
        return new is self or new in _MOVES[self]


# pending -> spawned -> ready -> constructing -> attached; failed and exited are reached from every state. A move the
# table does not allow is refused and the state stays: the host agent writes events from two threads, so a fast worker's
# ready event may be read before its spawned event, and the worker stays ready.
_MOVES: dict[WorkerState, frozenset[WorkerState]] = {
    WorkerState.PENDING: frozenset(
        {WorkerState.SPAWNED, WorkerState.READY, WorkerState.FAILED, WorkerState.EXITED}
    ),  # READY: its ready event overtook the spawned one
    WorkerState.SPAWNED: frozenset({WorkerState.READY, WorkerState.FAILED, WorkerState.EXITED}),
    WorkerState.READY: frozenset({WorkerState.CONSTRUCTING, WorkerState.FAILED, WorkerState.EXITED}),
    WorkerState.CONSTRUCTING: frozenset({WorkerState.ATTACHED, WorkerState.FAILED, WorkerState.EXITED}),
    WorkerState.ATTACHED: frozenset({WorkerState.FAILED, WorkerState.EXITED}),
    WorkerState.FAILED: frozenset({WorkerState.EXITED}),  # a failed worker's process exits (or is stopped)
    WorkerState.EXITED: frozenset({WorkerState.FAILED}),  # an attach that fails after the process exited says why
}

#: Serving: its cell counts as alive and Prometheus scrapes it.
LIVE_STATES = frozenset({WorkerState.READY, WorkerState.CONSTRUCTING, WorkerState.ATTACHED})
#: Its start is over without it being ready.
ENDED_STATES = frozenset({WorkerState.FAILED, WorkerState.EXITED})
