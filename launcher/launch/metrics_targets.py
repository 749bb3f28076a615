"""The metrics targets: every live worker's ``/metrics``, published to the launch's Prometheus service discovery."""

from __future__ import annotations

import logging

from launcher.config.specs import CommandWorkerSpec
from launcher.launch.cell_table import CellTable
from launcher.launch.cells import WorkerInfo
from launcher.launch.launch_services import LaunchServices
from launcher.launch.worker_state import LIVE_STATES

log = logging.getLogger(__name__)


class MetricsTargets:
    """Computes the targets from the cell table and publishes them when they change.

    A target is labelled with its pool, cell, worker, host and ``miles_job``; a worker leaves the list when it exits
    or is stopped, and a restarted one joins again. A serve worker's port comes from its ready line; a command
    worker's from the port its spec names as ``metrics_port``."""

    def __init__(self, table: CellTable, services: LaunchServices) -> None:
        self._table = table
        self._services = services
        self._published: dict[str, dict[str, str]] | None = None

    def _metrics_port_of(self, worker: WorkerInfo) -> int | None:
        if worker.kind == "serve":
            return worker.metrics_port
        spec = self._table.config.pool(worker.placement.pool_id).worker
        if isinstance(spec, CommandWorkerSpec) and spec.metrics_port is not None:
            return worker.ports.get(spec.metrics_port)
        return None

    def scrape_targets(self) -> dict[str, dict[str, str]]:
        """``{"address:port": labels}`` of every live worker that serves ``/metrics``."""
        job = self._table.config.job.label
        targets: dict[str, dict[str, str]] = {}
        with self._table.cond:
            for worker in self._table.workers():
                port = self._metrics_port_of(worker)
                if port is None or worker.state not in LIVE_STATES or worker.stopping:
                    continue
                address = f"[{worker.address}]" if ":" in worker.address else worker.address
                targets[f"{address}:{port}"] = {
                    "pool": worker.placement.pool_id,
                    "cell": worker.placement.cell_id,
                    "worker": worker.worker_id,
                    "host": worker.host,
                    "miles_job": job,
                }
        return targets

    def sync(self) -> None:
        """Publish the live targets if they changed (under the table's lock, so changes land in order)."""
        sd = self._services.service_discovery
        if sd is None:
            return
        with self._table.cond:
            targets = self.scrape_targets()
            if targets == self._published:
                return
            self._published = targets
            try:
                sd.set_targets(targets)
            except (OSError, ValueError) as exc:
                log.warning("service discovery: cannot publish %d target(s): %s", len(targets), exc)
