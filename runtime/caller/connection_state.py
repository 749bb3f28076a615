"""Where a new call to one actor goes: the state of a :class:`~runtime.caller.connection.Connection`, and its moves.

``IDLE``: no socket yet; the first call opens it on the loop. ``OPEN``: calls are sent at once, from the calling
thread. ``RESTARTING``: a spawner restarts the actor; new calls wait for the new incarnation (or their deadline).
``DEAD``: the actor is gone or this process closed the connection; every call fails with ActorDied.
"""

from __future__ import annotations

import enum


class ConnectionState(enum.Enum):
    IDLE = "idle"
    OPEN = "open"
    RESTARTING = "restarting"
    DEAD = "dead"


#: The moves a connection may make. A restart released before any call opened the socket goes back to IDLE.
MOVES: dict[ConnectionState, frozenset[ConnectionState]] = {
    ConnectionState.IDLE: frozenset({ConnectionState.OPEN, ConnectionState.RESTARTING, ConnectionState.DEAD}),
    ConnectionState.OPEN: frozenset({ConnectionState.RESTARTING, ConnectionState.DEAD}),
    ConnectionState.RESTARTING: frozenset({ConnectionState.IDLE, ConnectionState.OPEN, ConnectionState.DEAD}),
    ConnectionState.DEAD: frozenset(),
}
