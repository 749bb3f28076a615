"""LocalOpener: a ``provider = "local"`` host's agent runs as a child process of the launcher; pipes carry the JSON
lines (launcher/hosts/agent_process.py)."""

from __future__ import annotations

import os

from launcher.config.hosts_config import HostConfig
from launcher.errors import HostCheckError
from launcher.hosts.agent_link import AgentLink
from launcher.hosts.agent_process import agent_argv, open_agent_process
from launcher.hosts.agent_wiring import AgentWiring
from launcher.launch.curve_keys import remove_keys


class LocalOpener:
    """Starts ``python -m launcher.agent.host_agent`` for a local host on this machine, in its workdir's environment."""

    def __init__(self, wiring: AgentWiring) -> None:
        self.wiring = wiring

    def open(self, host: HostConfig) -> AgentLink:
        """Start the agent as a child process and wait for its hello."""
        try:
            host.workdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HostCheckError(f"host {host.name!r}: cannot create workdir {host.workdir}: {exc.strerror}") from None
        settings = self.wiring.settings
        argv = agent_argv(host.python, host, settings.heartbeat_timeout_s)
        env = {**os.environ, **host.env}
        return open_agent_process(host, settings, self.wiring.on_event, argv, env=env, remove=_remove_keys)


def _remove_keys(key_dir: str | None, _code: int | None) -> None:
    remove_keys(key_dir)  # the agent removes them when it exits; not when it was killed
