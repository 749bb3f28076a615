"""BaseWorkerProvider: one host agent per host; start/stop cells, wait ready, attach actors, watch for deaths.

Subclasses only say how to open an agent on a host (``_open_agent``): LocalProvider runs it as a local
subprocess, SSHProvider over an SSH exec channel. Everything else (ports, spawn, readiness, attach, death
reports, the state file) lives here. Thread-safe: agent events arrive on reader threads and mutate state under
``self._cond``.

Security: with ``[launcher] curve`` (the default) the provider generates this launch's CURVE keys on first
connect (:mod:`launcher.curve_keys`), ships them to every host agent, gives every worker ``MILES_CURVE_DIR`` and
attaches with them (``provider.curve_dir``); teardown removes them everywhere.

Names: the provider is its launch's name authority: it serves the launch's registry of actor names
(:mod:`runtime.name_service`) from this process, and every worker and command job finds it in
``MILES_NAME_SERVICE`` (:meth:`name_service_env`), so a name is one name on every host.

Metrics: the provider serves Prometheus HTTP service discovery (``provider.metrics_sd_url``) and mirrors it into
``{launcher.workdir}/prometheus-targets.json``, listing every live worker's ``/metrics`` with the labels pool,
cell, worker, host and miles_job; a worker leaves the list when it exits and a restarted one joins again.
"""

from __future__ import annotations

import json
import logging
import platform
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

from launcher import agent_protocol as proto
from launcher import curve_keys
from launcher.agent_link import AgentLink
from launcher.cell_starter import CellStarter
from launcher.cells import CellInfo, DeathReport, WorkerInfo
from launcher.errors import AgentError, HostCheckError, LauncherError, UnknownPool
from launcher.hosts_config import ClusterConfig, HostConfig, open_bind_hosts
from launcher.launch_state import write_state
from launcher.placement import CellPlacement, PlacementPlan, plan_placement
from launcher.provider_service import ProviderService, serve_provider_api
from launcher.service_discovery import ServiceDiscovery
from launcher.specs import CommandWorkerSpec
from runtime import name_service
from runtime.service import ServiceServer

log = logging.getLogger(__name__)

LogSink = Callable[[str, str], None]  # (stream, prefixed text)
DeathCallback = Callable[[DeathReport], None]
SD_FILE = "prometheus-targets.json"  # file_sd JSON under the launcher workdir
_LIVE_STATES = ("ready", "attached")


def launcher_versions() -> tuple[str, str | None]:
    """(python version, miles-actors version) of the launcher itself."""
    try:
        package = metadata.version(proto.PACKAGE_NAME)
    except metadata.PackageNotFoundError:
        package = None
    return platform.python_version(), package


class BaseWorkerProvider(ABC):
    """Starts and supervises the cells of a placement plan on the hosts of a cluster config."""

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
        self.log_sink = log_sink
        self.on_death = on_death
        self.state_path = state_path
        self.progress = progress
        self.deaths: list[DeathReport] = []
        self._cond = threading.Condition(threading.RLock())
        self._links: dict[str, AgentLink] = {}
        self._cells: dict[str, dict[int, CellInfo]] = {}
        self._workers: dict[str, WorkerInfo] = {}
        self._closing = False
        self.launch_id = curve_keys.new_launch_id()
        self.curve_dir: str | None = None  # this launch's CURVE keys on the launcher host (None: CURVE off)
        self._key_files: dict[str, str] = {}
        self._host_key_dirs: dict[str, str] = {}  # host -> its copy of the keys
        self.lost_hosts: dict[str, str] = {}  # host -> why its agent was lost
        self.reach_back: dict[str, str] = {}  # SSH host -> the launcher's address as that host reaches it
        self.restarts: dict[str, int] = {}  # cell id -> times restart_cell started it again
        self.service_discovery: ServiceDiscovery | None = None
        self.name_server: name_service.NameServer | None = None  # this launch's names (runtime.name_service)
        self.provider_api: ServiceServer | None = None  # launcher.provider_service, for jobs and actors
        self._sd_published: dict[str, dict[str, str]] | None = None

    @abstractmethod
    def _open_agent(self, host: HostConfig) -> AgentLink:
        """Start the host agent on ``host`` and return its started link (hello received)."""

    # ---- lifecycle -------------------------------------------------------------------------------------------

    def connect(self, hosts: list[str] | None = None) -> None:
        """Start (in parallel) and check one host agent per host used by the plan (again for a host whose agent
        was lost); all-or-nothing (on failure the provider is closed). The first call also creates this launch's
        CURVE keys and starts the service discovery endpoint."""
        wanted = hosts if hosts is not None else self.plan.hosts_used()
        names = [h for h in wanted if h not in self._links or not self._links[h].alive]
        if not names:
            return
        for name in names:  # a lost agent: drop its link (and its keys on the host) before starting a new one
            stale = self._links.pop(name, None)
            if stale is not None:
                stale.close(grace_s=0, timeout_s=5)
                self._host_key_dirs.pop(name, None)
        try:
            self._prepare_launch()
        except LauncherError:
            self.close(grace_s=0)
            raise
        pool = ThreadPoolExecutor(
            max_workers=min(self.settings.max_parallel_hosts, len(names)), thread_name_prefix="connect"
        )
        futures = {name: pool.submit(self._connect_one, self.config.host(name)) for name in names}
        errors: list[LauncherError] = []
        try:
            for name, future in futures.items():
                try:
                    self._links[name] = future.result()
                except LauncherError as exc:
                    errors.append(exc)
                except Exception as exc:  # an unexpected failure still names the host
                    errors.append(AgentError(f"host {name!r}: cannot start host agent: {exc!r}"))
        finally:  # Ctrl-C while connecting: agents that came up anyway are recorded, so close() stops them
            pool.shutdown(wait=True)
            for name, future in futures.items():
                if name not in self._links and future.exception() is None:
                    self._links[name] = future.result()
        if errors:
            self.close(grace_s=0)
            if len(errors) == 1:
                raise errors[0]
            raise type(errors[0])("; ".join(str(e) for e in errors))
        self._say_remote_sd_url(names)
        self._save_state()

    def _connect_one(self, host: HostConfig) -> AgentLink:
        started = time.monotonic()
        link = self._open_agent(host)
        try:
            self._check_host(host, link.hello or {})
            if self.curve_dir is not None:
                self._ship_keys(host, link)
        except LauncherError:
            link.close(grace_s=0, timeout_s=5)
            raise
        hello = link.hello or {}
        keys = ", CURVE keys installed" if self.curve_dir is not None else ""
        self._say(
            f"host {host.name}: agent pid {hello.get('pid')} up (Python {hello.get('python')}, miles-actors "
            f"{hello.get('package_version')}{keys}) in {time.monotonic() - started:.2f}s"
        )
        self.lost_hosts.pop(host.name, None)
        return link

    def _prepare_launch(self) -> None:
        """Once per provider, before the first agent starts: this launch's CURVE keys and service discovery."""
        if self.settings.curve and self.curve_dir is None:
            keys = curve_keys.create_launch_keys(Path(self.settings.workdir), self.launch_id)
            self._key_files = curve_keys.key_files(keys.directory)
            self.curve_dir = keys.directory
        if self.name_server is None:
            self._serve_names()
        if self.provider_api is None:
            self.provider_api = serve_provider_api(
                ProviderService(provider=self), curve_dir=self.curve_dir, open_bind=self._open_bind()
            )
        if self.settings.metrics_sd_port >= 0 and self.service_discovery is None:
            host, port = self.settings.metrics_sd_host, self.settings.metrics_sd_port
            path = Path(self.settings.workdir) / SD_FILE
            try:
                self.service_discovery = ServiceDiscovery(host=host, port=port, file_path=path)
            except (OSError, ValueError) as exc:
                raise LauncherError(
                    f"cannot serve Prometheus service discovery on {host}:{port} ([launcher] metrics_sd_host / "
                    f"metrics_sd_port; 0 picks a free port, -1 turns it off): {exc}"
                ) from None
            self._say(f"Prometheus service discovery: {self.metrics_sd_url}; file_sd: {path}")

    def _open_bind(self) -> bool:
        """Whether the launch's services listen on every interface: when SSH hosts must reach them (with the rule
        of actors' open binds: CURVE on, or ``allow_open_binds_without_curve``); else on loopback."""
        return bool(open_bind_hosts(self.config)) and (
            self.curve_dir is not None or self.settings.allow_open_binds_without_curve
        )

    def _serve_names(self) -> None:
        """Serve this launch's name registry (on every interface or on loopback: :meth:`_open_bind`)."""
        open_bind = self._open_bind()
        try:
            self.name_server = name_service.serve(curve_dir=self.curve_dir, open_bind=open_bind)
        except (OSError, RuntimeError) as exc:
            raise LauncherError(f"cannot serve the launch's actor names: {exc}") from None
        where = "every interface" if open_bind else "loopback"
        self._say(f"actor name service on {where}, port {self.name_server.port}")

    def name_service_env(self, host: str | None) -> str:
        """``MILES_NAME_SERVICE`` for a process on ``host`` (None: the launcher's host): the service as that host
        reaches this process (an SSH host: the address its SSH connection came from; a local host: loopback)."""
        if self.name_server is None:
            raise LauncherError("the launch's name service is not running (connect() starts it)")
        reach = self.reach_back.get(host, "127.0.0.1") if host is not None else "127.0.0.1"
        return self.name_server.address(reach).to_json()

    def _ship_keys(self, host: HostConfig, link: AgentLink) -> None:
        """Send the keys to the host's agent (over its SSH channel or pipe); it writes them 0600 under its workdir."""
        try:
            reply = link.request(
                proto.OP_CURVE_KEYS,
                timeout_s=self.settings.connect_timeout_s + 10,
                dir=curve_keys.host_key_dir_name(self.launch_id, host.name),
                files=self._key_files,
            )
        except AgentError as exc:
            raise AgentError(
                f"host {host.name!r}: cannot install the CURVE keys under {host.workdir} ({exc}); check that "
                "the workdir is writable, or set [launcher] curve = false on a trusted network"
            ) from None
        path = str(reply.get("path"))
        link.key_dir = path
        self._host_key_dirs[host.name] = path

    def host_curve_dir(self, host: str) -> str | None:
        """Where ``host``'s workers find the keys (``MILES_CURVE_DIR``); None when CURVE is off."""
        if self.curve_dir is None:
            return None
        path = self._host_key_dirs.get(host)
        if path is None:
            raise AgentError(f"host {host!r}: has no CURVE keys (its agent is not connected)")
        return path

    @property
    def metrics_sd_url(self) -> str | None:
        """URL of the Prometheus HTTP service discovery (``http_sd_configs``) as this machine reaches it."""
        sd = self.service_discovery
        if sd is None:
            return None
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(sd.host, sd.host)
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{sd.port}{sd.path}"

    @property
    def metrics_sd_file(self) -> Path | None:
        """The file_sd JSON (``file_sd_configs``) mirroring the same targets."""
        return self.service_discovery.file_path if self.service_discovery is not None else None

    def _say_remote_sd_url(self, hosts: list[str]) -> None:
        """The discovery URL as newly connected SSH hosts reach the launcher (where a Prometheus there scrapes)."""
        sd = self.service_discovery
        if sd is None or sd.host not in ("0.0.0.0", "::", ""):
            return
        for address in sorted({self.reach_back[h] for h in hosts if h in self.reach_back}):
            names = ", ".join(h for h in hosts if self.reach_back.get(h) == address)
            shown = f"[{address}]" if ":" in address else address
            self._say(f"Prometheus service discovery from {names}: http://{shown}:{sd.port}{sd.path}")

    def _say(self, message: str, level: int = logging.INFO) -> None:
        log.log(level, "%s", message)
        if self.progress is not None:
            self.progress(message)

    def _check_host(self, host: HostConfig, hello: dict[str, Any]) -> None:
        python, package = launcher_versions()
        if self.settings.check_versions:
            remote_python = str(hello.get("python"))
            if remote_python.split(".")[:2] != python.split(".")[:2]:
                raise HostCheckError(
                    f"host {host.name!r}: {host.python} is Python {remote_python}, the launcher runs {python}; "
                    "use the same Python minor version on every host (hosts.toml `python`)"
                )
            if hello.get("package_version") != package:
                raise HostCheckError(
                    f"host {host.name!r}: miles-actors {hello.get('package_version')} is installed for "
                    f"{host.python}, the launcher has {package}; install the same version on every host"
                )
        ambient = hello.get("cuda_visible_devices")
        planned = sorted({g for w in self.plan.workers() if w.host == host.name for g in w.gpu_ids})
        if ambient is not None and planned:
            visible = {part.strip() for part in str(ambient).split(",") if part.strip()}
            missing = [g for g in planned if str(g) not in visible]
            if missing:
                raise HostCheckError(
                    f"host {host.name!r}: its environment sets CUDA_VISIBLE_DEVICES={ambient!r} but the plan "
                    f"uses GPU ids {planned} (missing {missing}); the launcher never rewrites it silently: set "
                    f"hosts.toml gpus = [{ambient}] or unset CUDA_VISIBLE_DEVICES on that host"
                )

    def start_all(self, *, deadline_s: float | None = None) -> list[CellInfo]:
        """Connect and start every cell of every pool of the plan (one batch), waiting until all are ready."""
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
        self.restarts[cell_id] = self.restarts.get(cell_id, 0) + 1
        return self.start_cells(pool_id, [index], deadline_s=deadline_s)[0]

    def _start(self, cells: list[CellPlacement], deadline_s: float | None) -> list[CellInfo]:
        deadline = time.monotonic() + (deadline_s if deadline_s is not None else self.settings.start_deadline_s)
        self.connect(list(dict.fromkeys(w.host for c in cells for w in c.workers)))
        return CellStarter(self, cells, deadline).run()

    def stop_cells(self, pool_id: str, indices: list[int] | None = None, *, grace_s: float | None = None) -> None:
        """Kill the workers of some cells (their trees), and forget them."""
        grace = self.settings.stop_grace_s if grace_s is None else grace_s
        with self._cond:
            cells = [c for i, c in self._cells.get(pool_id, {}).items() if indices is None or i in indices]
            for cell in cells:
                cell.alive = False
                for worker in cell.workers:
                    worker.stopping = True
            self._sync_targets()
        requests = []
        for cell in cells:
            for worker in cell.workers:
                link = self._links.get(worker.host)
                if link is not None and link.alive:
                    requests.append((link, worker))
        with ThreadPoolExecutor(max_workers=max(1, len(requests)), thread_name_prefix="stop") as pool:
            futures = [
                (
                    worker,
                    pool.submit(link.request, proto.OP_KILL, timeout_s=grace + 10, id=worker.worker_id, grace_s=grace),
                )
                for link, worker in requests
            ]
        for worker, future in futures:
            if future.exception() is not None:
                log.warning("stopping %s on %s: %s", worker.worker_id, worker.host, future.exception())
        with self._cond:
            for cell in cells:
                self._cells[pool_id].pop(cell.index, None)
                for worker in cell.workers:
                    self._workers.pop(worker.worker_id, None)
            self._sync_targets()
        self._save_state()

    def close(self, *, grace_s: float | None = None) -> None:
        """Stop everything on every host (agents kill their trees and remove their keys), drop the links, remove
        this launch's keys and stop the service discovery; idempotent."""
        grace = self.settings.stop_grace_s if grace_s is None else grace_s
        with self._cond:
            self._closing = True
            for worker in self._workers.values():
                worker.stopping = True
            for cells in self._cells.values():
                for cell in cells.values():
                    cell.alive = False
            self._sync_targets()
            links = list(self._links.values())
        if links:
            with ThreadPoolExecutor(max_workers=len(links), thread_name_prefix="close") as pool:
                for link in links:
                    pool.submit(link.close, grace_s=grace, timeout_s=grace + 10)
        self._links.clear()
        for worker in list(self._workers.values()):
            if worker.handle is not None:  # its process is gone: calls fail at once, its address may be reused
                worker.handle.mark_dead(f"actor {worker.worker_id} was stopped by the launcher")
        self._host_key_dirs.clear()
        curve_keys.remove_keys(self.curve_dir)
        if self.provider_api is not None:
            self.provider_api.close()
            self.provider_api = None
        if self.name_server is not None:
            self.name_server.close()
            self.name_server = None
        if self.service_discovery is not None:
            self.service_discovery.close()
        if self.state_path is not None:
            self.state_path.unlink(missing_ok=True)

    def __enter__(self) -> BaseWorkerProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- queries ---------------------------------------------------------------------------------------------

    def cells(self, pool_id: str) -> list[CellInfo]:
        """Started cells of a pool, in index order; UnknownPool if hosts.toml has no such pool."""
        known = [pool.id for pool in self.config.pools]
        if pool_id not in known:
            raise UnknownPool(f"no pool {pool_id!r} in {self.config.source or 'hosts.toml'}; its pools are {known}")
        with self._cond:
            return [c for _, c in sorted(self._cells.get(pool_id, {}).items())]

    def handles(self, pool_id: str) -> list[Any]:
        """Actor handles of a pool's serve workers, cell by cell, worker by worker."""
        return [h for cell in self.cells(pool_id) for h in cell.handles]

    def addresses(self, pool_id: str) -> list[str]:
        """``host:port`` of every worker of a pool."""
        return [a for cell in self.cells(pool_id) for a in cell.addresses]

    def worker_infos(self, pool_id: str | None = None) -> list[WorkerInfo]:
        """Workers of one pool, or all."""
        with self._cond:
            return [w for w in self._workers.values() if pool_id is None or w.placement.pool_id == pool_id]

    def connected_hosts(self) -> list[str]:
        """Hosts with a live agent."""
        return [name for name, link in self._links.items() if link.alive]

    def link(self, host: str) -> AgentLink:
        """The agent link of a connected host."""
        return self._links[host]

    # ---- events ----------------------------------------------------------------------------------------------

    def _on_event(self, host: str, event: dict[str, Any]) -> None:
        ev = event.get("ev")
        if ev == proto.EV_AGENT_LOST:
            self._on_agent_lost(host, event)
            return
        with self._cond:
            worker = self._workers.get(str(event.get("id")))
            if worker is None or worker.host != host:
                return
            if ev == proto.EV_LOG:
                worker.recent_output.append(str(event.get("text")))
            elif ev == proto.EV_SPAWNED:
                worker.pid, worker.create_time = event.get("pid"), event.get("create_time")
                worker.log_path = event.get("log_path")
                if worker.state == "pending":  # never back from ready: events of two agent threads may cross
                    worker.state = "spawned"
            elif ev == proto.EV_SPAWN_FAILED:
                worker.state, worker.error = "failed", str(event.get("error"))
            elif ev == proto.EV_READY:
                self._on_ready(worker, event)
            elif ev == proto.EV_NOT_READY:
                worker.state, worker.error = "failed", str(event.get("error"))
            elif ev == proto.EV_EXITED:
                self._on_exited(worker, event.get("returncode"), _exit_reason(event))
            if ev in (proto.EV_READY, proto.EV_NOT_READY, proto.EV_SPAWN_FAILED, proto.EV_EXITED):
                self._sync_targets()
            self._cond.notify_all()
        if ev == proto.EV_LOG and self.log_sink is not None:
            self.log_sink(str(event.get("stream")), str(event.get("text")))
        if ev in (proto.EV_SPAWNED, proto.EV_EXITED):
            self._save_state()

    def _on_ready(self, worker: WorkerInfo, event: dict[str, Any]) -> None:
        line = event.get("line")
        if worker.kind == "serve" and line:
            try:
                info = json.loads(str(line)[len(proto.READY_PREFIX) :].strip())
                worker.boot_id = info.get("boot_id")
                worker.metrics_port = info.get("metrics_port")
            except (ValueError, AttributeError):
                worker.state, worker.error = "failed", f"unparsable ready line {line!r}"
                return
        if worker.state in ("pending", "spawned"):
            worker.state = "ready"

    def _on_exited(self, worker: WorkerInfo, returncode: Any, reason: str) -> None:
        """Called under the lock: a worker exited (or its host was lost)."""
        previous = worker.state
        worker.returncode = returncode if isinstance(returncode, int) else None
        worker.state = "exited"
        if worker.stopping or self._closing:
            return
        if previous in ("pending", "spawned", "ready") and not worker.error:
            worker.error = f"{reason} before it was ready"
        cell = self._cells.get(worker.placement.pool_id, {}).get(worker.placement.cell_index)
        if cell is None or not cell.alive:
            return
        cell.alive = False
        report = DeathReport(
            cell_id=cell.cell_id,
            worker_id=worker.worker_id,
            host=worker.host,
            pid=worker.pid,
            returncode=worker.returncode,
            reason=reason,
        )
        cell.death_reason = str(report)
        self.deaths.append(report)
        log.error("%s", report)
        if worker.handle is not None and hasattr(worker.handle, "mark_dead"):
            try:
                worker.handle.mark_dead(str(report))
            except Exception:
                log.exception("mark_dead failed for %s", worker.worker_id)
        if self.on_death is not None:
            threading.Thread(target=self.on_death, args=(report,), name="on-death", daemon=True).start()

    def _on_agent_lost(self, host: str, event: dict[str, Any]) -> None:
        with self._cond:
            if event.get("closing") or self._closing:
                return
            why = str(event.get("reason"))
            self.lost_hosts[host] = why
            workers = [w for w in self._workers.values() if w.host == host and w.state != "exited"]
        self._say(f"host {host!r} lost: {why}; its {len(workers)} worker(s) die with its agent", logging.ERROR)
        with self._cond:
            reason = f"lost with its host agent ({why})"
            for worker in workers:
                if worker.state != "exited":
                    self._on_exited(worker, None, reason)
            self._sync_targets()
            self._cond.notify_all()

    # ---- Prometheus service discovery ------------------------------------------------------------------------

    def _metrics_port_of(self, worker: WorkerInfo) -> int | None:
        if worker.kind == "serve":
            return worker.metrics_port
        spec = self.config.pool(worker.placement.pool_id).worker
        if isinstance(spec, CommandWorkerSpec) and spec.metrics_port is not None:
            return worker.ports.get(spec.metrics_port)
        return None

    def scrape_targets(self) -> dict[str, dict[str, str]]:
        """``{"address:port": labels}`` of every live worker that serves ``/metrics``."""
        job = self.config.job.label
        targets: dict[str, dict[str, str]] = {}
        with self._cond:
            for worker in self._workers.values():
                port = self._metrics_port_of(worker)
                if port is None or worker.state not in _LIVE_STATES or worker.stopping:
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

    def _sync_targets(self) -> None:
        """Publish the live targets if they changed (called under the lock, so changes land in order)."""
        sd = self.service_discovery
        if sd is None:
            return
        with self._cond:
            targets = self.scrape_targets()
            if targets == self._sd_published:
                return
            self._sd_published = targets
            try:
                sd.set_targets(targets)
            except (OSError, ValueError) as exc:
                log.warning("service discovery: cannot publish %d target(s): %s", len(targets), exc)

    # ---- state file ------------------------------------------------------------------------------------------

    def _save_state(self) -> None:
        if self.state_path is None or self._closing:
            return
        with self._cond:
            hosts: dict[str, Any] = {}
            for name, link in self._links.items():
                host = self.config.host(name)
                hosts[name] = {
                    "address": host.address,
                    "provider": host.provider,
                    "agent_pid": (link.hello or {}).get("pid"),
                    "curve_dir": self._host_key_dirs.get(name),  # `miles-launch down` removes it
                    "workers": {},
                }
            for worker in self._workers.values():
                if worker.pid is not None and worker.host in hosts:
                    placement = worker.placement
                    cell = self._cells.get(placement.pool_id, {}).get(placement.cell_index)
                    hosts[worker.host]["workers"][worker.worker_id] = {
                        "pid": worker.pid,
                        "create_time": worker.create_time,
                        "state": worker.state,
                        "log_path": worker.log_path,
                        "pool": placement.pool_id,
                        "cell": placement.cell_id,
                        "restarts": self.restarts.get(placement.cell_id, 0),
                        "last_error": worker.error or (cell.death_reason if cell is not None else None),
                    }
        try:
            write_state(self.state_path, self.config, hosts)
        except OSError as exc:
            log.warning("cannot write state file %s: %s", self.state_path, exc)

    def _register(self, cell: CellInfo) -> None:
        with self._cond:
            self._cells.setdefault(cell.pool_id, {})[cell.index] = cell
            for worker in cell.workers:
                self._workers[worker.worker_id] = worker


def _exit_reason(event: dict[str, Any]) -> str:
    if event.get("signal"):
        return f"was killed by {event['signal']}"
    return f"exited with code {event.get('returncode')}"
