"""The phase of an actor server, and the one table of moves between phases (``_NEXT``), so that no code path can
construct twice, or serve after leaving."""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable


class ServerPhase(enum.Enum):
    CREATED = "created"  # not listening yet
    LISTENING = "listening"  # answers built-in methods; no actor instance yet, a __construct__ may come
    CONSTRUCTING = "constructing"  # a __construct__ was accepted: no other construct (nor a __prepare__) is
    SERVING = "serving"  # the instance is installed: calls to its methods are routed
    LEAVING = "leaving"  # leave(): calls in flight are answered ActorDied, later ones refused, stop() follows
    STOPPING = "stopping"  # stop(): last answers get their grace to be acknowledged, then lanes and socket close
    STOPPED = "stopped"


_P = ServerPhase
# - CREATED -> LISTENING: start() bound the socket;
# - LISTENING -> CONSTRUCTING: a __construct__ was accepted; -> SERVING: configure() installed the instance (an actor
#   once its constructor returned; a driver's in-process server at once, with no constructor call);
# - LISTENING, CONSTRUCTING, SERVING -> LEAVING: leave() (exit_actor(), or a BaseException out of a method);
# - any phase before STOPPING -> STOPPING: stop() (a shutdown call, a signal, the parent left, or after leave);
# - STOPPING -> STOPPED: the last answers were acknowledged (or their grace ran out), lanes and socket closed.
# A constructor that fails leaves the server CONSTRUCTING: no second __construct__ is accepted. One that returns after
# the server began to leave installs its instance, but the phase stays where it is.
_NEXT: dict[ServerPhase, frozenset[ServerPhase]] = {
    _P.CREATED: frozenset({_P.LISTENING, _P.STOPPING}),
    _P.LISTENING: frozenset({_P.CONSTRUCTING, _P.SERVING, _P.LEAVING, _P.STOPPING}),
    _P.CONSTRUCTING: frozenset({_P.SERVING, _P.LEAVING, _P.STOPPING}),
    _P.SERVING: frozenset({_P.LEAVING, _P.STOPPING}),
    _P.LEAVING: frozenset({_P.STOPPING}),
    _P.STOPPING: frozenset({_P.STOPPED}),
    _P.STOPPED: frozenset(),
}

#: Phases in which the process leaves: every call is answered (or refused) with ActorDied.
LEAVING_PHASES = frozenset({_P.LEAVING, _P.STOPPING, _P.STOPPED})


class PhaseMachine:
    """One server's phase (``now``, read without a lock); :meth:`move` is the only way to change it."""

    __slots__ = ("_lock", "now")

    def __init__(self) -> None:
        self.now = ServerPhase.CREATED
        self._lock = threading.Lock()

    def move(self, to: ServerPhase, *, entering: Callable[[ServerPhase], None] | None = None) -> ServerPhase | None:
        """Move to ``to`` if the table allows it from the current phase; returns the phase left, or None (the
        move is refused, nothing changes). Any thread. ``entering(left)`` runs under the lock just before the
        move, for what must be set before anyone sees the new phase."""
        with self._lock:
            left = self.now
            if to not in _NEXT[left]:
                return None
            if entering is not None:
                entering(left)
            self.now = to
            return left
