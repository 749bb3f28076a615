"""Engine cells (``{server_id}-{index}``) and their states (RouterSettings moved to router_settings.py).

A cell keeps its id across restarts; its engine process (and URL) change with each incarnation::

    initializing ──ready──▶ pending_weights ──weights──▶ serving ──dies / unhealthy──▶ initializing ...
         └───────────── out of restarts, or shutdown ─────────────▶ disposed

Only ``serving`` cells are registered with the router; ``pending_weights`` cells are running but hold no
weights the controller can vouch for, so they take weight updates and no traffic.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from actors.inference.engine_client import EngineClient
from actors.inference.engine_launcher import EngineProcess
from actors.inference.router_settings import RouterSettings as RouterSettings  # its former home


class CellState(str, enum.Enum):
    INITIALIZING = "initializing"
    PENDING_WEIGHTS = "pending_weights"
    SERVING = "serving"
    DISPOSED = "disposed"


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
