"""Where a new call to one actor goes: the state of a :class:`~runtime.caller.connection.Connection`, and its moves.
"""

from __future__ import annotations

import enum


class ConnectionState(enum.Enum):
    IDLE = "idle"  # no socket yet; the first call opens it on the loop
    OPEN = "open"  # calls are sent at once, from the calling thread
    RESTARTING = "restarting"  # a spawner restarts the actor; new calls wait for the new incarnation (or deadline)
    DEAD = "dead"  # the actor is gone or this process closed the connection; every call fails with ActorDied


#: The moves a connection may make. A restart released before any call opened the socket goes back to IDLE.
MOVES: dict[ConnectionState, frozenset[ConnectionState]] = {
    ConnectionState.IDLE: frozenset({ConnectionState.OPEN, ConnectionState.RESTARTING, ConnectionState.DEAD}),
    ConnectionState.OPEN: frozenset({ConnectionState.RESTARTING, ConnectionState.DEAD}),
    ConnectionState.RESTARTING: frozenset({ConnectionState.IDLE, ConnectionState.OPEN, ConnectionState.DEAD}),
    ConnectionState.DEAD: frozenset(),
}
