"""WorkerProvider: starts, stops and supervises the cells of a placement plan on the hosts of a cluster config.

One provider serves every hosts.toml (local, SSH and Slurm hosts, mixed): it puts the launch together from its parts
and drives them, and keeps the state file (``state_path``) that ``miles-launch status`` and ``down`` read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from launcher.agent.agent_commands import Kill
from launcher.cluster import ClusterLedger, LedgerService, PlacedActors
from launcher.config.hosts_config import ClusterConfig
from launcher.config.placement import CellPlacement, PlacementPlan, plan_placement
from launcher.errors import LauncherError
from launcher.hosts.agent_link import AgentLink
from launcher.hosts.agent_opener import AgentOpeners
from launcher.hosts.agent_pool import AgentPool
from launcher.hosts.agent_wiring import AgentWiring
from launcher.launch import curve_keys
from launcher.launch.cell_starter import CellStarter
from launcher.launch.cell_table import CellTable
from launcher.launch.cells import CellInfo, DeathReport, WorkerInfo
from launcher.launch.launch_phase import LaunchPhase
from launcher.launch.launch_services import LaunchServices
from launcher.launch.launch_state import write_state
from launcher.launch.metrics_targets import MetricsTargets
from launcher.launch.provider_service import ProviderService
from launcher.launch.worker_events import DeathCallback, LogSink, WorkerEvents

log = logging.getLogger(__name__)


class WorkerProvider:
    """Starts and supervises the cells of a placement plan on the hosts of a cluster config.

    How each host's agent is opened is the one thing that differs between hosts: ``openers`` picks it per host."""

    def __init__(
        self,
        config: ClusterConfig,
        plan: PlacementPlan | None = None,
        *,
        log_sink: LogSink | None = None,
        on_death: DeathCallback | None = None,
        state_path: Path | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.plan = plan if plan is not None else plan_placement(config.hosts, config.pools)
        self.settings = config.launcher
        self.state_path = state_path
        self.progress = progress
        # The started cells and their workers, the deaths, restarts and lost hosts, under one lock.
        self.table = CellTable(config, self.plan)
        self.phase = LaunchPhase()  # the state file carries it: `miles-launch status` shows what the console says
        self._state_lock = threading.Lock()  # one writer at a time, each writing what it read: no stale overwrite
        # This launch's CURVE keys, name service, provider API, placement API (every host's resources and who holds
        # them: the cluster ledger) and Prometheus service discovery.
        launch_id = curve_keys.new_launch_id()
        self.ledger = ClusterLedger(config.hosts, self.plan, launch_id=launch_id)
        # Actors placed on any host at run time (runtime.spawn(resources=, host=)): started by the hosts' agents.
        self.placed = PlacedActors(config, self.ledger, _LaunchAgents(self), log_sink=log_sink)
        ledger_service = LedgerService(
            ledger=self.ledger, placed=self.placed, owner_timeout_s=self.settings.heartbeat_timeout_s
        )
        self.services = LaunchServices(
            config,
            ProviderService(table=self.table, control=self),
            ledger_service,
            launch_id=launch_id,
            say=self._say,
        )
        # The live workers' ``/metrics``, published to the service discovery.
        self.targets = MetricsTargets(self.table, self.services)
        # The agents' events applied to the table (deaths reported).
        self._events = WorkerEvents(
            self.table,
            targets_changed=self.targets.sync,
            save_state=self._save_state,
            say=self._say,
            log_sink=log_sink,
            on_death=on_death,
            on_host_lost=self.placed.host_lost,
            other=self.placed.on_event,
        )
        wiring = AgentWiring(self.settings, self._events.on_event, self.services.reach_back, self._say)
        self.openers = AgentOpeners(config, wiring)  # how each host's agent starts (its ``provider``)
        # One host agent per host, checked and given the keys.
        self.agents = AgentPool(
            config, self.plan, open_agent=self.openers.open, on_connected=self._host_connected, say=self._say
        )

    # ---- lifecycle -------------------------------------------------------------------------------------------

    def connect(self, hosts: list[str] | None = None) -> None:
        """Start (in parallel) and check one host agent per host (:meth:`hosts_to_connect`; again for a host whose
        agent was lost); all-or-nothing (on failure the provider is closed). The first call also creates this
        launch's CURVE keys and starts the launch services (names, provider and placement APIs, service
        discovery)."""
        names = self.agents.missing(hosts if hosts is not None else self.hosts_to_connect())
        if not names:
            return
        try:
            self.services.start()
            self.agents.connect(names, self.services.keys)
        except LauncherError as exc:
            self.close(grace_s=0)
            spare = [name for name in names if name not in self.plan.hosts_used() and name in str(exc)]
            if spare:  # the same error, saying why a host no pool uses was connected at all
                raise type(exc)(
                    f"{exc}. No pool runs on {', '.join(spare)}: its agent starts so that actors can be placed there "
                    "at run time; [launcher] cluster = false connects only the pools' hosts"
                ) from exc
            raise
        self.services.say_remote_sd_url(names)
        self._save_state()

    def hosts_to_connect(self) -> list[str]:
        """Every host of hosts.toml (``[launcher] cluster``, the default), else the hosts the pools use."""
        return [host.name for host in self.config.hosts] if self.settings.cluster else self.plan.hosts_used()

    def _host_connected(self, host: str, hello: dict[str, Any]) -> None:
        self.table.lost_hosts.pop(host, None)
        cpus = hello.get("cpus")
        self.ledger.host_up(host, cpus=cpus if type(cpus) is int and 0 <= cpus < 1 << 20 else 0)

    def _say(self, message: str, level: int = logging.INFO) -> None:
        log.log(level, "%s", message)
        if self.progress is not None:
            self.progress(message)

    def start_all(self, *, deadline_s: float | None = None) -> list[CellInfo]:
        """Connect every host (:meth:`hosts_to_connect`) and start every cell of every pool of the plan (one batch),
        waiting until all are ready."""
        self.connect()
        return self._start(self.plan.cells(), deadline_s)

    def start_cells(
        self, pool_id: str, indices: list[int] | None = None, *, deadline_s: float | None = None
    ) -> list[CellInfo]:
        """Start cells of one pool (all by default) and wait until every worker is ready and attached."""
        cells = [c for c in self.plan.cells(pool_id) if indices is None or c.index in indices]
        return self._start(cells, deadline_s)

    def restart_cell(self, pool_id: str, index: int, *, deadline_s: float | None = None) -> CellInfo:
        """Stop a cell (dead or alive) and start it again on the same placement."""
        self.stop_cells(pool_id, [index])
        cell_id = f"{pool_id}-{index}"
        self.table.restarts[cell_id] = self.table.restarts.get(cell_id, 0) + 1
        return self.start_cells(pool_id, [index], deadline_s=deadline_s)[0]

    def _start(self, cells: list[CellPlacement], deadline_s: float | None) -> list[CellInfo]:
        deadline = time.monotonic() + (deadline_s if deadline_s is not None else self.settings.start_deadline_s)
        self.connect(list(dict.fromkeys(w.host for c in cells for w in c.workers)))
        starter = CellStarter(  # one start of a batch of cells, all-or-nothing
            cells,
            deadline,
            table=self.table,
            agents=self.agents,
            services=self.services,
            stop_cells=self.stop_cells,
            save_state=self._save_state,
            say=self._say,
        )
        return starter.run()

    def stop_cells(self, pool_id: str, indices: list[int] | None = None, *, grace_s: float | None = None) -> None:
        """Kill the workers of some cells (their trees), and forget them."""
        grace = self.settings.stop_grace_s if grace_s is None else grace_s
        with self.table.cond:
            cells = self.table.mark_stopping(pool_id, indices)
            self.targets.sync()
        requests = []
        for cell in cells:
            for worker in cell.workers:
                link = self.agents.live_link(worker.host)
                if link is not None:
                    requests.append((link, worker))
        with ThreadPoolExecutor(max_workers=max(1, len(requests)), thread_name_prefix="stop") as pool:
            futures = [
                (
                    worker,
                    pool.submit(link.request, Kill(worker.worker_id, grace_s=grace), timeout_s=grace + 10),
                )
                for link, worker in requests
            ]
        for worker, future in futures:
            if future.exception() is not None:
                log.warning("stopping %s on %s: %s", worker.worker_id, worker.host, future.exception())
        with self.table.cond:
            self.table.forget(cells)
            self.targets.sync()
        self._save_state()

    def close(self, *, grace_s: float | None = None) -> None:
        """Stop everything on every host (agents kill their trees and remove their keys), drop the links, remove
        this launch's keys and stop the launch services; idempotent."""
        grace = self.settings.stop_grace_s if grace_s is None else grace_s
        with self.table.cond:
            self.table.mark_closing()
            self.targets.sync()
        self.agents.close(grace)
        for worker in self.table.workers():
            if worker.handle is not None:  # its process is gone: calls fail at once, its address may be reused
                worker.handle.mark_dead(f"actor {worker.worker_id} was stopped by the launcher")
        self.services.close()
        if self.state_path is not None:
            self.state_path.unlink(missing_ok=True)

    def __enter__(self) -> WorkerProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- queries ---------------------------------------------------------------------------------------------

    def cells(self, pool_id: str) -> list[CellInfo]:
        """Started cells of a pool, in index order; UnknownPool if hosts.toml has no such pool."""
        return self.table.cells(pool_id)

    def handles(self, pool_id: str) -> list[Any]:
        """Actor handles of a pool's serve workers, cell by cell, worker by worker."""
        return [h for cell in self.cells(pool_id) for h in cell.handles]

    def addresses(self, pool_id: str) -> list[str]:
        """``host:port`` of every worker of a pool."""
        return [a for cell in self.cells(pool_id) for a in cell.addresses]

    def worker_infos(self, pool_id: str | None = None) -> list[WorkerInfo]:
        """Workers of one pool, or all."""
        return self.table.workers(pool_id)

    def connected_hosts(self) -> list[str]:
        """Hosts with a live agent."""
        return self.agents.connected_hosts()

    def link(self, host: str) -> AgentLink:
        """The agent link of a connected host."""
        return self.agents.link(host)

    @property
    def deaths(self) -> list[DeathReport]:
        """A report for every worker that died while its cell was meant to run, in order."""
        return self.table.deaths

    @property
    def restarts(self) -> dict[str, int]:
        """Cell id -> times :meth:`restart_cell` started it again."""
        return self.table.restarts

    @property
    def lost_hosts(self) -> dict[str, str]:
        """Host -> why its agent was lost (until it connects again)."""
        return self.table.lost_hosts

    @property
    def curve_dir(self) -> str | None:
        """This launch's CURVE keys on the launcher host (None: CURVE off); attach and connect with them."""
        return self.services.curve_dir

    @property
    def metrics_sd_url(self) -> str | None:
        """URL of the Prometheus HTTP service discovery (``http_sd_configs``) as this machine reaches it."""
        return self.services.metrics_sd_url

    @property
    def metrics_sd_file(self) -> Path | None:
        """The file_sd JSON (``file_sd_configs``) mirroring the same targets."""
        return self.services.metrics_sd_file

    def name_service_env(self, host: str | None) -> str:
        """``MILES_NAME_SERVICE`` for a process on ``host`` (None: the launcher's host)."""
        return self.services.name_service_env(host)

    # ---- state file ------------------------------------------------------------------------------------------

    def save_state(self) -> None:
        """Write the state file now (``status`` reads it); the launcher's steps call it when its phase moves."""
        self._save_state()

    def _save_state(self) -> None:
        if self.state_path is None or self.table.closing:
            return
        with self._state_lock:
            with self.table.cond:
                hosts = self.agents.state_hosts()
                for host, worker_id, record in self.table.worker_records():
                    if host in hosts:
                        hosts[host]["workers"][worker_id] = record
            try:
                write_state(self.state_path, self.config, hosts, launch=self.phase.record())
            except OSError as exc:
                log.warning("cannot write state file %s: %s", self.state_path, exc)


class _LaunchAgents:
    """What placed actors need of the launch: its agents, their code and keys, and the services' addresses."""

    def __init__(self, provider: WorkerProvider) -> None:
        self._provider = provider

    def link(self, host: str) -> AgentLink:
        return self._provider.agents.link(host)

    def python_path(self, host: str) -> list[str]:
        return self._provider.agents.code.python_path(self._provider.config.host(host))

    def curve_dir(self, host: str) -> str | None:
        return self._provider.agents.host_curve_dir(host)

    def name_service_env(self, host: str) -> str:
        return self._provider.services.name_service_env(host)

    def placement_api_env(self, host: str) -> str:
        return self._provider.services.placement_api_env(host)
