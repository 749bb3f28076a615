"""How the launcher opens a host agent: one strategy per kind of host, chosen by each host's ``provider``.

A local host, an SSH host and a Slurm node differ only in how their agent starts and how its JSON lines travel, so
that is the one seam; the keys and the job's code then go over each agent's own channel.
"""

from __future__ import annotations

from typing import Protocol

from launcher.config.config_errors import PROVIDER_FIX
from launcher.config.hosts_config import ClusterConfig, HostConfig
from launcher.errors import ConfigError
from launcher.hosts.agent_link import AgentLink
from launcher.hosts.agent_wiring import AgentWiring
from launcher.hosts.local_opener import LocalOpener
from launcher.hosts.srun_opener import SrunOpener
from launcher.hosts.ssh_opener import SshOpener


class AgentOpener(Protocol):
    """Starts the host agent of one kind of host: LocalOpener (a child process), SshOpener (an SSH exec channel),
    SrunOpener (an ``srun`` step)."""

    def open(self, host: HostConfig) -> AgentLink:
        """Start ``host``'s agent and return its started link (hello received); a LauncherError names the host."""
        ...


class AgentOpeners:
    """The launch's openers, one per ``provider`` value; opens each host's agent with the one its config names.

    One WorkerProvider drives every launch through it, whatever mix of hosts it has."""

    def __init__(self, config: ClusterConfig, wiring: AgentWiring) -> None:
        srun_args = config.cluster.srun_args if config.cluster is not None else ()
        self.by_provider: dict[str, AgentOpener] = {
            "local": LocalOpener(wiring),
            "ssh": SshOpener(wiring),
            "slurm": SrunOpener(wiring, srun_args=srun_args),
        }
        for host in config.hosts:
            self.for_host(host)  # a host no opener serves is refused now, before any agent starts

    def for_host(self, host: HostConfig) -> AgentOpener:
        """The opener of ``host`` (by its ``provider``); ConfigError naming the host and the fix for another value."""
        opener = self.by_provider.get(host.provider)
        if opener is None:
            raise ConfigError(f"host {host.name!r}: unknown provider {host.provider!r}; {PROVIDER_FIX}")
        return opener

    def open(self, host: HostConfig) -> AgentLink:
        """Start ``host``'s agent with its opener."""
        return self.for_host(host).open(host)
