"""SrunOpener: inside a Slurm allocation, a ``provider = "slurm"`` host's agent runs as an ``srun`` step on its node.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence

from launcher.config.hosts_config import HostConfig
from launcher.hosts.agent_link import AgentLink
from launcher.hosts.agent_process import agent_shell_command, open_agent_process
from launcher.hosts.agent_wiring import AgentWiring
from launcher.hosts.slurm_commands import SlurmError, run_tool, step_argv

log = logging.getLogger(__name__)


def address_towards(address: str) -> str:
    """This machine's address on the route to ``address`` (what a process there reaches the launcher at)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((address, 9))  # no packet is sent: this only picks the route
            return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostbyname(socket.gethostname())


class SrunOpener:
    """Starts a node's host agent as an srun step of the allocation this launcher runs in.

    The step (``srun --overlap --kill-on-bad-exit --nodelist=NODE -N1 -n1``) runs the same shell command as an SSH
    channel would (launcher/hosts/agent_process.py ``agent_shell_command``) and its pipes carry the JSON lines, so
    the agents, their fork servers, GPU ids and LOCAL_RANK, lost hosts, restarts through the provider API and the
    metrics targets are the ones every host shares. When the launcher dies srun's stdin closes and the agent kills
    its tree; when the allocation ends Slurm kills every step."""

    def __init__(self, wiring: AgentWiring, *, srun_args: Sequence[str] = ()) -> None:
        self.wiring = wiring
        self.srun_args = tuple(srun_args)  # [cluster] srun_args: more srun options for every agent's step

    def open(self, host: HostConfig) -> AgentLink:
        """Start the step and wait for its agent's hello."""
        wiring = self.wiring
        wiring.reach_back[host.name] = address_towards(host.reach_address)
        argv = [*step_argv(host.name, name=f"miles-agent-{host.name}", extra=self.srun_args), "bash", "-c"]
        argv.append(agent_shell_command(host, wiring.settings))
        wiring.say(f"host {host.name}: starting its agent with srun (step on node {host.name}, {host.address})")

        def remove(key_dir: str | None, code: int | None) -> None:
            # A clean exit: the agent removed its keys. A step that did not end (a dead node, a partition): the node
            # cannot be reached, or its agent removes them itself once the heartbeats stop.
            if key_dir is None or code in (0, None):
                return
            try:
                run_tool([*step_argv(host.name, name="miles-cleanup"), "rm", "-rf", "--", key_dir], timeout_s=15)
            except SlurmError as exc:
                log.warning("host %s: could not remove the CURVE keys %s: %s", host.name, key_dir, exc)

        return open_agent_process(host, wiring.settings, wiring.on_event, argv, env=dict(os.environ), remove=remove)
