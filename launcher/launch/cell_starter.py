"""Start a batch of cells: allocate ports, spawn through the agents, wait ready, attach actors; all-or-nothing."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

from launcher.agent.agent_commands import Ports
from launcher.config.placement import CellPlacement
from launcher.config.specs import CommandWorkerSpec
from launcher.console.progress import Say
from launcher.errors import WorkerStartError
from launcher.hosts.agent_pool import AgentPool
from launcher.launch import provider_service
from launcher.launch.actor_construction import ActorConstruction
from launcher.launch.cell_table import CellTable
from launcher.launch.cells import CellInfo, WorkerInfo
from launcher.launch.launch_services import LaunchServices
from launcher.launch.worker_command import build_spawn, port_counts
from launcher.launch.worker_state import ENDED_STATES, LIVE_STATES, WorkerState
from runtime.internals import DEFAULT_NAMESPACE, SpawnTicket

log = logging.getLogger(__name__)

T = TypeVar("T")
_DONE_STATES = ENDED_STATES | {WorkerState.READY}  # its start is over, one way or the other


class StopCells(Protocol):
    """Stops cells of a pool and forgets them (the provider's ``stop_cells``)."""

    def __call__(self, pool_id: str, indices: list[int] | None = None, *, grace_s: float | None = None) -> None: ...


class CellStarter:
    """One start of a batch of cells; on any failure the batch is stopped (``stop_cells``) and an error naming
    every failed worker (host, pid, reason, last output lines) is raised.

    It registers the batch's cells in the cell table and waits on its lock for the workers' states (the agents'
    events move them); it asks the agent pool for ports and spawns, the launch services for what each worker is
    given (keys, the name service, the provider API) and names every attached actor there."""

    def __init__(
        self,
        cells: list[CellPlacement],
        deadline: float,
        *,
        table: CellTable,
        agents: AgentPool,
        services: LaunchServices,
        stop_cells: StopCells,
        save_state: Callable[[], None],
        say: Say,
    ) -> None:
        self.cells = cells
        self.deadline = deadline
        self.table = table
        self.config = table.config
        self.settings = table.config.launcher
        self.agents = agents
        self.services = services
        self._stop_cells = stop_cells
        self._save_state = save_state
        self._say = say
        self.infos: list[CellInfo] = []

    def run(self) -> list[CellInfo]:
        """Start the batch; return the cells, all alive."""
        started = time.monotonic()
        try:
            self._prepare()
            workers = [w for cell in self.infos for w in cell.workers]
            self._spawn(workers)
            self._wait_ready(workers, started)
            self._announce([w for w in workers if w.kind == "command"])
            self._attach([w for w in workers if w.kind == "serve"])
        except BaseException:
            self._stop_batch()
            raise
        with self.table.cond:
            for cell in self.infos:
                cell.alive = all(w.state in LIVE_STATES for w in cell.workers)
        self._save_state()
        return self.infos

    def _remaining(self) -> float:
        return max(0.1, self.deadline - time.monotonic())

    def _prepare(self) -> None:
        config = self.config
        need: dict[str, int] = {}
        for cell in self.cells:
            spec = config.pool(cell.pool_id).worker
            worker_ports, cell_ports = port_counts(spec)
            need[cell.master_host] = need.get(cell.master_host, 0) + 1 + len(cell_ports)
            for worker in cell.workers:
                need[worker.host] = need.get(worker.host, 0) + len(worker_ports)

        def ports_on(host: str) -> list[int]:
            reply = self.agents.link(host).request(Ports(need[host]), timeout_s=min(30.0, self._remaining()))
            return list(reply["ports"])

        free = dict(zip(need, self._on_every_host(ports_on, list(need)), strict=True))
        for cell in self.cells:
            spec = config.pool(cell.pool_id).worker
            worker_ports, cell_ports = port_counts(spec)
            master = config.host(cell.master_host)
            master_port = free[master.name].pop()
            shared = {name: free[master.name].pop() for name in cell_ports}
            workers = []
            for placement in cell.workers:
                ports = {**shared, **{name: free[placement.host].pop() for name in worker_ports}}
                host = config.host(placement.host)
                workers.append(
                    WorkerInfo(placement=placement, kind=spec.kind, address=host.reach_address, ports=ports, env={})
                )
            info = CellInfo(
                pool_id=cell.pool_id,
                index=cell.index,
                workers=workers,
                master_addr=master.reach_address,
                master_port=master_port,
            )
            self.infos.append(info)
            self.table.register(info)

    def _spawn(self, workers: list[WorkerInfo]) -> None:
        config = self.config
        for worker in workers:
            cell = next(c for c in self.infos if worker in c.workers)
            command = build_spawn(
                config.host(worker.host),
                config.pool(worker.placement.pool_id).worker,
                worker.placement,
                ports=worker.ports,
                master_addr=cell.master_addr,
                master_port=cell.master_port,
                stream_logs=self.settings.stream_logs,
                curve_dir=self.agents.host_curve_dir(worker.host),
                name_service=self.services.name_service_env(worker.host),
                placement_api=self.services.placement_api_env(worker.host),
            )
            worker.env = command.env
            stdin = None
            if worker.kind == "serve":  # the token travels inside the agent's SSH channel, to the worker's stdin
                worker.ticket = SpawnTicket.new()  # its token proves the attach; its keys are the actor's own
                stdin = worker.ticket.line()
            python_path = self.agents.code.python_path(config.host(worker.host))  # the job's code
            self.agents.link(worker.host).send(dataclasses.replace(command, python_path=python_path, stdin=stdin))
        hosts = sorted({w.host for w in workers})
        self._say(f"spawned {len(workers)} worker(s) on {len(hosts)} host(s): {', '.join(hosts)}")

    def _wait_ready(self, workers: list[WorkerInfo], started: float) -> None:
        cond = self.table.cond
        last_ready = -1
        with cond:
            while True:
                ready = sum(w.state is WorkerState.READY for w in workers)
                if ready != last_ready:
                    last_ready = ready
                    self._say(f"ready {ready}/{len(workers)} ({time.monotonic() - started:.1f}s)")
                failed = [w for w in workers if w.state in ENDED_STATES]
                if failed:
                    raise WorkerStartError(self._failure("did not start", failed))
                if ready == len(workers):
                    return
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    late = [w for w in workers if w.state not in _DONE_STATES]
                    for worker in late:
                        worker.error = "start deadline passed"
                    raise WorkerStartError(self._failure("were not ready before the start deadline", late))
                cond.wait(min(remaining, 1.0))

    def _attach(self, workers: list[WorkerInfo]) -> None:
        if not workers:
            return
        ActorConstruction(
            workers,
            table=self.table,
            kwargs_for=lambda worker, spec: {**spec.kwargs, **self._plan_kwargs(worker, spec.plan_kwargs)},
            curve_dir=self.services.curve_dir,
            deadline=self.deadline,
            describe_failure=self._failure,
            save_state=self._save_state,
            say=self._say,
        ).run()
        self._say(f"attached {len(workers)} actor(s)")
        self._publish_names()

    def _announce(self, workers: list[WorkerInfo]) -> None:
        """Say each ready command worker's ``announce`` line (e.g. a web page's URL)."""
        for worker in workers:
            spec = self.config.pool(worker.placement.pool_id).worker
            if isinstance(spec, CommandWorkerSpec) and spec.announce:
                self._say(spec.announce.format(host=worker.address, **worker.ports))

    def _publish_names(self) -> None:
        """Register every attached actor of the batch in the launch's name service (``runtime.get_actor`` by its
        worker id on every host), whoever held the name before (a cell that was restarted)."""
        registry = self.services.name_registry
        assert registry is not None, "connect() starts the name service"
        for worker in (w for cell in self.infos for w in cell.workers):
            if worker.handle is not None:
                registry.put(DEFAULT_NAMESPACE, worker.worker_id, worker.handle.to_state())

    def _on_every_host(self, work: Callable[[str], T], hosts: list[str]) -> list[T]:
        """``work(host)`` on the hosts in parallel (one agent round trip each, at most ``max_parallel_hosts`` at
        once); the results in order."""
        if len(hosts) <= 1:
            return [work(host) for host in hosts]
        workers = min(self.settings.max_parallel_hosts, len(hosts))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hosts") as pool:
            return list(pool.map(work, hosts))

    def _plan_kwargs(self, worker: WorkerInfo, names: tuple[str, ...]) -> dict[str, object]:
        cell = next(c for c in self.infos if worker in c.workers)
        values: dict[str, object] = {
            "rank": worker.placement.worker_index,
            "world_size": worker.placement.world_size,
            "local_rank": worker.placement.local_rank,
            "master_addr": cell.master_addr,
            "master_port": cell.master_port,
            "gpu_ids": list(worker.gpu_ids),
            "cell_id": cell.cell_id,
            "worker_id": worker.worker_id,
            "host": worker.host,
        }
        if "provider_api" in names:  # the launcher's provider API as this worker's host reaches it
            values["provider_api"] = provider_service.address_for(self.services, worker.host)
        return {name: values[name] for name in names}

    def _failure(self, what: str, workers: list[WorkerInfo]) -> str:
        lines = [f"{len(workers)} worker(s) {what}:"]
        for worker in workers:
            lines.append(f"  {worker.describe()}")
            if worker.log_path:
                lines.append(f"    log file on {worker.host}: {worker.log_path}")
            output = list(worker.recent_output)[-10:]
            if output:
                lines.append("    last output:")
                lines += [f"      {line}" for line in output]
        return "\n".join(lines)

    def _stop_batch(self) -> None:
        by_pool: dict[str, list[int]] = {}
        for cell in self.infos:
            by_pool.setdefault(cell.pool_id, []).append(cell.index)
        for pool_id, indices in by_pool.items():
            try:
                self._stop_cells(pool_id, indices, grace_s=min(self.settings.stop_grace_s, 5.0))
            except Exception:
                log.exception("stopping the failed batch of pool %s", pool_id)
