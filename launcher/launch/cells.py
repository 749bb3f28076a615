"""Live state of started workers and cells, as the provider sees it (mutated only under the cell table's lock)."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pydantic
import pydantic.dataclasses

from launcher.config.placement import WorkerPlacement
from launcher.launch.worker_state import WorkerState
from transport import register_type


@dataclass
class WorkerInfo:
    """One worker process: where it runs, its ports, pid, endpoint and (serve workers) actor handle."""

    placement: WorkerPlacement
    kind: str  # "serve" | "command"
    address: str  # host address other hosts use
    ports: dict[str, int]
    env: dict[str, str] = field(repr=False)  # holds the launch's session secret: never printed
    state: WorkerState = WorkerState.PENDING  # changed only by move_to and fail (launcher.launch.worker_state)
    pid: int | None = None
    create_time: float | None = None
    endpoint: str | None = None
    boot_id: str | None = None
    metrics_port: int | None = None  # Prometheus /metrics of a serve worker (from its ready line)
    handle: Any = None
    ticket: Any = field(default=None, repr=False)  # runtime.core.control_auth.SpawnTicket of a serve worker
    returncode: int | None = None
    error: str | None = None
    log_path: str | None = None
    stopping: bool = False
    recent_output: deque[str] = field(default_factory=lambda: deque(maxlen=20))

    @property
    def worker_id(self) -> str:
        """``{pool_id}-{cell}-{worker}``."""
        return self.placement.worker_id

    @property
    def host(self) -> str:
        """Host name from hosts.toml."""
        return self.placement.host

    @property
    def gpu_ids(self) -> tuple[int, ...]:
        """GPU ids this worker was given."""
        return self.placement.gpu_ids

    @property
    def port(self) -> int | None:
        """The worker's main port (``port``), if any."""
        return self.ports.get("port")

    def move_to(self, state: WorkerState) -> bool:
        """Move to ``state`` if the state machine allows it from the current state; False (and no change) if not."""
        if not self.state.can_become(state):
            return False
        self.state = state
        return True

    def fail(self, error: str) -> None:
        """Its start failed (allowed from every state): the state is failed, ``error`` says why."""
        self.move_to(WorkerState.FAILED)
        self.error = error

    def describe(self) -> str:
        """One line for errors and progress."""
        where = f"host={self.host} pid={self.pid}"
        return f"{self.worker_id} ({where}, {self.state}{', ' + self.error if self.error else ''})"


@dataclass
class CellInfo:
    """A gang of workers; not alive once any of its workers died."""

    pool_id: str
    index: int
    workers: list[WorkerInfo]
    master_addr: str
    master_port: int | None
    alive: bool = False
    death_reason: str | None = None

    @property
    def cell_id(self) -> str:
        """``{pool_id}-{index}``."""
        return f"{self.pool_id}-{self.index}"

    @property
    def handles(self) -> list[Any]:
        """Actor handles of the cell's serve workers, in worker order."""
        return [w.handle for w in self.workers if w.handle is not None]

    @property
    def addresses(self) -> list[str]:
        """``host:port`` of every worker that has a main port."""
        return [f"{w.address}:{w.port}" for w in self.workers if w.port is not None]


@register_type
@pydantic.dataclasses.dataclass(frozen=True, config=pydantic.ConfigDict(extra="forbid"))
class DeathReport:
    """A worker that died while its cell was meant to run (also what the provider API's ``deaths`` answers: checked
    field by field where it arrives)."""

    cell_id: str
    worker_id: str
    host: str
    pid: int | None
    returncode: int | None
    reason: str
    at: float = field(default_factory=time.time)

    def __str__(self) -> str:
        return (
            f"cell {self.cell_id} is not alive: worker {self.worker_id} on {self.host} (pid {self.pid}) {self.reason}"
        )
