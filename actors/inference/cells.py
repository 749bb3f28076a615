"""Engine cells (``{server_id}-{index}``), their states, and the router settings of an inference server.

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

from pydantic import BaseModel, ConfigDict, Field

from actors.inference.engine_client import EngineClient
from actors.inference.engine_launcher import EngineProcess
from actors.processes import advertised_host


class CellState(str, enum.Enum):
    INITIALIZING = "initializing"
    PENDING_WEIGHTS = "pending_weights"
    SERVING = "serving"
    DISPOSED = "disposed"


class RouterSettings(BaseModel):
    """How the controller runs sglang-router (``python -m sglang_router.launch_router``); immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(
        default_factory=lambda: advertised_host(),
        description="address the router listens on (default: this host's advertised address, MILES_ADVERTISE_HOST, "
        "set by the launcher; else 127.0.0.1)",
    )
    port: int | None = Field(default=None, ge=1, le=65535, description="None: a free port")
    prometheus_port: int | None = Field(default=None, ge=1, le=65535, description="None: a free port")
    policy: str = Field(default="cache_aware", description="cache_aware, round_robin, random, power_of_two")
    health_check_interval_s: int = Field(default=5, ge=1)
    health_failure_threshold: int = Field(default=2, ge=1)
    worker_startup_timeout_s: int = Field(default=120, ge=1)
    start_timeout_s: float = Field(default=60.0, gt=0)
    add_worker_timeout_s: float = Field(default=60.0, gt=0, description="until a new worker is listed healthy")
    log_level: str = "warn"
    extra_args: tuple[str, ...] = ()


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
