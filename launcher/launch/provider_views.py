"""What the provider API answers about cells: frozen, registered views of the launch's cells and their workers.

They cross the wire by name (:func:`transport.register_type`) and are validated field by field when they arrive
(pydantic), so a caller reads ``cell.workers[0].ports["port"]`` with its types checked, not a dict of anything.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from transport import register_type

CellState = Literal["alive", "starting", "dead", "stopped"]
_FROZEN = ConfigDict(frozen=True, extra="forbid")


@register_type
class WorkerView(BaseModel):
    """One worker of a started cell: where it runs (``address`` as other hosts reach its host), its ports, pid,
    state (a ``WorkerState`` value), GPUs, error, log file, and whether its host was lost."""

    model_config = _FROZEN

    worker_id: str
    kind: str  # "serve" | "command"
    host: str
    address: str
    ports: dict[str, int]
    pid: int | None
    state: str
    gpu_ids: list[int]
    error: str | None
    log_path: str | None
    host_lost: bool


@register_type
class CellView(BaseModel):
    """One cell of a pool, started or not: ``state`` alive/starting/dead/stopped; node 0's host, address, ports and
    pid (None and empty while stopped); its restarts, death reason, workers (none while stopped) and lost hosts."""

    model_config = _FROZEN

    pool: str
    index: int
    cell_id: str
    state: CellState
    host: str
    hosts: list[str]
    address: str | None
    ports: dict[str, int]
    pid: int | None
    restarts: int
    death_reason: str | None
    workers: list[WorkerView]
    lost_hosts: list[str]
