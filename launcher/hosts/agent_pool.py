"""The agent pool: one host agent per host, started in parallel, checked against the launcher, given the keys.

Every host a start needs gets a checked agent here, holding the launch's CURVE keys and the job's code, before any
worker is spawned on it.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from typing import Any

from launcher.agent import agent_protocol as proto
from launcher.agent.agent_commands import CurveKeys
from launcher.config.hosts_config import ClusterConfig, HostConfig
from launcher.config.placement import PlacementPlan
from launcher.console.progress import Say
from launcher.errors import AgentError, HostCheckError, LauncherError
from launcher.hosts.agent_link import AgentLink
from launcher.launch import curve_keys
from launcher.launch.code_shipping import CodeShipment
from launcher.launch.gpu_check import gpu_problem


def launcher_versions() -> tuple[str, str | None]:
    """(python version, miles-actors version) of the launcher itself."""
    try:
        package = metadata.version(proto.PACKAGE_NAME)
    except metadata.PackageNotFoundError:
        package = None
    return platform.python_version(), package


class AgentPool:
    """The links to the launch's host agents, by host name.

    The provider says how to open an agent on a host (``open_agent``: the host's opener,
    launcher/hosts/agent_opener.py); the pool starts the agents of the hosts a start needs (again for a host whose
    agent was lost), checks each, ships it the keys and the code (launcher/launch/code_shipping.py)."""

    def __init__(
        self,
        config: ClusterConfig,
        plan: PlacementPlan,
        *,
        open_agent: Callable[[HostConfig], AgentLink],
        on_connected: Callable[[str, dict[str, Any]], None],
        say: Say,
    ) -> None:
        self.config = config
        self.plan = plan
        self.settings = config.launcher
        self._open_agent = open_agent
        self._on_connected = on_connected  # a host's agent is up (again)
        self._say = say
        self._links: dict[str, AgentLink] = {}
        self._keys: curve_keys.LaunchKeys | None = None
        self._host_key_dirs: dict[str, str] = {}  # host -> its copy of the keys
        self.code = CodeShipment(config, say)  # the job's code, shipped to each host that is not local

    def missing(self, hosts: list[str]) -> list[str]:
        """The hosts of ``hosts`` without a live agent."""
        return [h for h in hosts if h not in self._links or not self._links[h].alive]

    def connect(self, names: list[str], keys: curve_keys.LaunchKeys | None) -> None:
        """Start (in parallel) and check the agents of ``names`` (a lost one's link and keys are dropped first),
        shipping ``keys`` to each (None: CURVE is off). The first LauncherError (all of them, joined) is raised
        once every start is over; agents that came up are kept either way, so :meth:`close` stops them."""
        self._keys = keys
        for name in names:  # a lost agent: drop its link (and its keys on the host) before starting a new one
            stale = self._links.pop(name, None)
            if stale is not None:
                stale.close(grace_s=0, timeout_s=5)
                self._host_key_dirs.pop(name, None)
        if any(self.config.host(name).provider != "local" for name in names):
            self.code.packages()  # packed once, before the hosts' threads ship it
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
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise type(errors[0])("; ".join(str(e) for e in errors))

    def _connect_one(self, host: HostConfig) -> AgentLink:
        started = time.monotonic()
        link = self._open_agent(host)
        try:
            self._check_host(host, link.hello or {})
            if self._keys is not None:
                self._ship_keys(host, link, self._keys)
            self.code.ship(host, link)
        except LauncherError:
            link.close(grace_s=0, timeout_s=5)
            raise
        hello = link.hello or {}
        keys = ", CURVE keys installed" if self._keys is not None else ""
        self._say(
            f"host {host.name}: agent pid {hello.get('pid')} up (Python {hello.get('python')}, miles-actors "
            f"{hello.get('package_version')}{keys}) in {time.monotonic() - started:.2f}s"
        )
        self._on_connected(host.name, hello)
        return link

    def _ship_keys(self, host: HostConfig, link: AgentLink, keys: curve_keys.LaunchKeys) -> None:
        """Send the keys to the host's agent (over its SSH channel or pipe); it writes them 0600 under its workdir."""
        try:
            reply = link.request(
                CurveKeys(curve_keys.host_key_dir_name(keys.launch_id, host.name), files=keys.files),
                timeout_s=self.settings.connect_timeout_s + 10,
            )
        except AgentError as exc:
            raise AgentError(
                f"host {host.name!r}: cannot install the CURVE keys under {host.workdir} ({exc}); check that "
                "the workdir is writable, or set [launcher] curve = false on a trusted network"
            ) from None
        path = str(reply.get("path"))  # where the host keeps them: its workers' MILES_CURVE_DIR
        link.key_dir = path
        self._host_key_dirs[host.name] = path

    def _check_host(self, host: HostConfig, hello: dict[str, Any]) -> None:
        """Check the agent's hello: Python and miles-actors versions as the launcher's, the plan's GPUs on the host
        and in its ``CUDA_VISIBLE_DEVICES``."""
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
        problem = gpu_problem(host.name, planned, hello.get("gpus")) if self.settings.gpu_check else None
        if problem:
            raise HostCheckError(problem)
        if ambient is not None and planned:
            visible = {part.strip() for part in str(ambient).split(",") if part.strip()}
            missing = [g for g in planned if str(g) not in visible]
            if missing:
                raise HostCheckError(
                    f"host {host.name!r}: its environment sets CUDA_VISIBLE_DEVICES={ambient!r} but the plan "
                    f"uses GPU ids {planned} (missing {missing}); the launcher never rewrites it silently: set "
                    f"hosts.toml gpus = [{ambient}] or unset CUDA_VISIBLE_DEVICES on that host"
                )

    def host_curve_dir(self, host: str) -> str | None:
        """Where ``host``'s workers find the keys (``MILES_CURVE_DIR``); None when CURVE is off."""
        if self._keys is None:
            return None
        path = self._host_key_dirs.get(host)
        if path is None:
            raise AgentError(f"host {host!r}: has no CURVE keys (its agent is not connected)")
        return path

    def connected_hosts(self) -> list[str]:
        """Hosts with a live agent."""
        return [name for name, link in self._links.items() if link.alive]

    def link(self, host: str) -> AgentLink:
        """The agent link of a connected host."""
        return self._links[host]

    def live_link(self, host: str) -> AgentLink | None:
        """The link of ``host`` if its agent is alive."""
        link = self._links.get(host)
        return link if link is not None and link.alive else None

    def state_hosts(self) -> dict[str, dict[str, Any]]:
        """Every host with an agent as the state file lists it (its workers still to be filled in)."""
        hosts: dict[str, dict[str, Any]] = {}
        for name, link in self._links.items():
            host = self.config.host(name)
            hosts[name] = {
                "address": host.address,
                "provider": host.provider,
                "agent_pid": (link.hello or {}).get("pid"),
                "curve_dir": self._host_key_dirs.get(name),  # `miles-launch down` removes it
                "workers": {},
            }
        return hosts

    def close(self, grace_s: float) -> None:
        """Close every link in parallel (each agent kills its tree and removes its keys) and forget them."""
        links = list(self._links.values())
        if links:
            with ThreadPoolExecutor(max_workers=len(links), thread_name_prefix="close") as pool:
                for link in links:
                    pool.submit(link.close, grace_s=grace_s, timeout_s=grace_s + 10)
        self._links.clear()
        self._host_key_dirs.clear()
        self.code.close()
