"""Start a batch of cells: allocate ports, spawn through the agents, wait ready, attach actors; all-or-nothing."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from launcher import agent_protocol as proto
from launcher import provider_service
from launcher.cells import CellInfo, WorkerInfo
from launcher.errors import WorkerStartError
from launcher.placement import CellPlacement
from launcher.specs import ServeWorkerSpec
from launcher.worker_command import build_spawn, port_counts
from runtime.control_auth import SpawnTicket
from runtime.naming import DEFAULT_NAMESPACE

if TYPE_CHECKING:
    from launcher.provider_base import BaseWorkerProvider

log = logging.getLogger(__name__)

_DONE_STATES = ("ready", "failed", "exited")
T = TypeVar("T")


class CellStarter:
    """One start of a batch of cells against a provider; on any failure the batch is stopped and an error
    naming every failed worker (host, pid, reason, last output lines) is raised."""

    def __init__(self, provider: BaseWorkerProvider, cells: list[CellPlacement], deadline: float) -> None:
        self.provider = provider
        self.cells = cells
        self.deadline = deadline
        self.infos: list[CellInfo] = []

    def run(self) -> list[CellInfo]:
        """Start the batch; return the cells, all alive."""
        started = time.monotonic()
        try:
            self._prepare()
            workers = [w for cell in self.infos for w in cell.workers]
            self._spawn(workers)
            self._wait_ready(workers, started)
            self._attach([w for w in workers if w.kind == "serve"])
        except BaseException:
            self._stop_batch()
            raise
        with self.provider._cond:
            for cell in self.infos:
                cell.alive = all(w.state in ("ready", "attached") for w in cell.workers)
        self.provider._save_state()
        return self.infos

    def _say(self, message: str) -> None:
        log.info("%s", message)
        if self.provider.progress is not None:
            self.provider.progress(message)

    def _remaining(self) -> float:
        return max(0.1, self.deadline - time.monotonic())

    def _prepare(self) -> None:
        config = self.provider.config
        need: dict[str, int] = {}
        for cell in self.cells:
            spec = config.pool(cell.pool_id).worker
            worker_ports, cell_ports = port_counts(spec)
            need[cell.master_host] = need.get(cell.master_host, 0) + 1 + len(cell_ports)
            for worker in cell.workers:
                need[worker.host] = need.get(worker.host, 0) + len(worker_ports)

        def ports_on(host: str) -> list[int]:
            reply = self.provider.link(host).request(
                proto.OP_PORTS, timeout_s=min(30.0, self._remaining()), n=need[host]
            )
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
            self.provider._register(info)

    def _spawn(self, workers: list[WorkerInfo]) -> None:
        config = self.provider.config
        for worker in workers:
            cell = next(c for c in self.infos if worker in c.workers)
            command = build_spawn(
                config.host(worker.host),
                config.pool(worker.placement.pool_id).worker,
                worker.placement,
                ports=worker.ports,
                master_addr=cell.master_addr,
                master_port=cell.master_port,
                stream_logs=self.provider.settings.stream_logs,
                curve_dir=self.provider.host_curve_dir(worker.host),
                name_service=self.provider.name_service_env(worker.host),
            )
            worker.env = command["env"]
            if worker.kind == "serve":  # the token travels inside the agent's SSH channel, to the worker's stdin
                worker.ticket = SpawnTicket.new()  # its token proves the attach; its keys are the actor's own
                command["stdin"] = worker.ticket.line()
            self.provider.link(worker.host).send(proto.OP_SPAWN, **command)
        hosts = sorted({w.host for w in workers})
        self._say(f"spawned {len(workers)} worker(s) on {len(hosts)} host(s): {', '.join(hosts)}")

    def _wait_ready(self, workers: list[WorkerInfo], started: float) -> None:
        cond = self.provider._cond
        last_ready = -1
        with cond:
            while True:
                ready = sum(w.state == "ready" for w in workers)
                if ready != last_ready:
                    last_ready = ready
                    self._say(f"ready {ready}/{len(workers)} ({time.monotonic() - started:.1f}s)")
                failed = [w for w in workers if w.state in ("failed", "exited")]
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
        from runtime import internals

        def attach(worker: WorkerInfo) -> None:
            spec = self.provider.config.pool(worker.placement.pool_id).worker
            assert isinstance(spec, ServeWorkerSpec)
            worker.endpoint = f"tcp://{worker.address}:{worker.port}"
            kwargs = {**spec.kwargs, **self._plan_kwargs(worker, spec.plan_kwargs)}
            try:
                worker.handle = internals.attach(
                    worker.endpoint,
                    spec.actor_class,
                    ticket=worker.ticket,
                    kwargs=kwargs,
                    name=worker.worker_id,
                    concurrency_groups=spec.concurrency_groups,
                    deadline_s=min(spec.attach_deadline_s, self._remaining()),
                    host=worker.host,
                    curve_dir=self.provider.curve_dir,  # None: plain TCP (CURVE off for this launch)
                )
            except Exception as exc:
                with self.provider._cond:
                    worker.state, worker.error = "failed", f"constructing {spec.actor_class} failed: {exc}"
                raise
            with self.provider._cond:
                if worker.state == "ready":
                    worker.state = "attached"

        with ThreadPoolExecutor(max_workers=min(16, len(workers)), thread_name_prefix="attach") as pool:
            futures = [pool.submit(attach, w) for w in workers]
        failed = [w for w, f in zip(workers, futures, strict=True) if f.exception() is not None]
        if failed:
            raise WorkerStartError(self._failure("failed to construct their actor", failed))
        self._say(f"attached {len(workers)} actor(s)")
        self._publish_names()

    def _publish_names(self) -> None:
        """Register every attached actor of the batch in the launch's name service (``runtime.get_actor`` by its
        worker id on every host), whoever held the name before (a cell that was restarted)."""
        server = self.provider.name_server
        assert server is not None, "connect() starts the name service"
        for worker in (w for cell in self.infos for w in cell.workers):
            if worker.handle is not None:
                server.registry.put(DEFAULT_NAMESPACE, worker.worker_id, worker.handle.to_state())

    def _on_every_host(self, work: Callable[[str], T], hosts: list[str]) -> list[T]:
        """``work(host)`` on the hosts in parallel (one agent round trip each, at most ``max_parallel_hosts`` at
        once); the results in order."""
        if len(hosts) <= 1:
            return [work(host) for host in hosts]
        workers = min(self.provider.settings.max_parallel_hosts, len(hosts))
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
            values["provider_api"] = provider_service.address_for(self.provider, worker.host)
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
                self.provider.stop_cells(pool_id, indices, grace_s=min(self.provider.settings.stop_grace_s, 5.0))
            except Exception:
                log.exception("stopping the failed batch of pool %s", pool_id)
