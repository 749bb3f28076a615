"""Engine cells (``{server_id}-{index}``) and their state machine: one id across restarts, one table of moves."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from actors.inference.engine_client import EngineClient
from actors.inference.engine_launcher import EngineProcess


class CellState(str, enum.Enum):
    INITIALIZING = "initializing"
    PENDING_WEIGHTS = "pending_weights"
    SERVING = "serving"
    DISPOSED = "disposed"


# initializing -ready-> pending_weights -weights-> serving -dies-> initializing; ready with restorable weights
# -> serving; a missed update -> pending_weights; out of restarts or shutdown -> disposed (final). Only serving
# cells are in the router: pending_weights ones run but hold no weights the controller can vouch for.
_EVERY_STATE = frozenset(CellState)
TRANSITIONS: dict[CellState, frozenset[CellState]] = {
    CellState.INITIALIZING: _EVERY_STATE,  # launched (again), ready without weights, restored and registered
    CellState.PENDING_WEIGHTS: _EVERY_STATE,  # restarted, caught up again, given weights and registered
    CellState.SERVING: _EVERY_STATE,  # restarted, missed an update, registered again with a new router
    CellState.DISPOSED: frozenset({CellState.DISPOSED}),  # shutdown() may run twice
}
LIVE_STATES = (CellState.SERVING, CellState.PENDING_WEIGHTS)  # running engines that take weight updates


class CellStateError(RuntimeError):
    """A change of state :data:`TRANSITIONS` does not allow (a disposed cell never comes back)."""


@dataclass(eq=False)
class EngineCell:
    """One engine slot of the server; mutated only on the controller's event loop."""

    cell_id: str
    index: int
    state: CellState = CellState.INITIALIZING
    process: EngineProcess | None = None
    client: EngineClient | None = None
    weight_version: str | None = None
    restarts: int = 0
    launched: bool = False
    router_worker_id: str | None = None
    health_failures: int = 0
    last_error: str | None = None
    busy: bool = False  # a start/restart task owns the cell: the health check leaves it alone

    def move(self, state: CellState, *, error: str | None = None) -> None:
        """Change state (and, when given, ``last_error``); refuses a move :data:`TRANSITIONS` does not list."""
        if state not in TRANSITIONS[self.state]:
            raise CellStateError(f"engine {self.cell_id}: {self.state.value} -> {state.value} is not a transition")
        self.state = state
        if error is not None:
            self.last_error = error

    @property
    def url(self) -> str | None:
        return self.process.url if self.process is not None else None

    def where(self) -> str:
        """'engine {id} at {url}' for messages."""
        return f"engine {self.cell_id} at {self.url or '(not started)'}"

    def view(self) -> dict[str, Any]:
        """What ``InferenceController.cells()`` reports for this cell."""
        return {
            "id": self.cell_id,
            "url": self.url,
            "state": self.state.value,
            "weight_version": self.weight_version,
            "restarts": self.restarts,
            "pid": self.process.pid if self.process is not None else None,
            "log_path": self.process.log_path if self.process is not None else None,
            "router_worker_id": self.router_worker_id,
            "last_error": self.last_error,
        }
