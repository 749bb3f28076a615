"""SshOpener: a ``provider = "ssh"`` host's agent runs over a paramiko exec channel, which carries the JSON lines."""

from __future__ import annotations

import time

import paramiko

from launcher.config.hosts_config import HostConfig
from launcher.console.launch_log import LOG_NAME
from launcher.errors import AgentError
from launcher.hosts.agent_link import AgentLink
from launcher.hosts.agent_process import agent_shell_command
from launcher.hosts.agent_wiring import AgentWiring
from launcher.hosts.ssh_remote import check_host, remove_remote_keys, ssh_connect


class SshOpener:
    """Starts a host's agent over one SSH connection per host.

    The agent's hello carries the host's Python and miles-actors versions (the agent pool checks them); only when
    the agent does not start is the host probed, to say why (no Python, no miles-actors). When the launcher dies the
    TCP connection drops, sshd closes the channel, and the agent (stdin EOF) kills its tree; a partition that keeps
    the connection half-open is caught by the agent's heartbeat timeout."""

    def __init__(self, wiring: AgentWiring) -> None:
        self.wiring = wiring

    def open(self, host: HostConfig) -> AgentLink:
        """Connect, run the agent on an exec channel and wait for its hello (probing the host if it does not come)."""
        wiring = self.wiring
        settings = wiring.settings
        started = time.monotonic()
        client = ssh_connect(host, settings.connect_timeout_s, log_file=settings.workdir / LOG_NAME)
        try:
            transport = client.get_transport()
            assert transport is not None
            wiring.reach_back[host.name] = str(transport.sock.getsockname()[0])  # where its SSH connection came from
            wiring.say(f"host {host.name}: SSH {host.ssh.user}@{host.address}:{host.ssh.port} in {_since(started)}")
            channel = transport.open_session(timeout=settings.connect_timeout_s)
            channel.exec_command(agent_shell_command(host, settings))

            closed = False

            def close_transport() -> None:
                nonlocal closed
                if closed:
                    return
                closed = True
                channel.close()
                try:
                    remove_remote_keys(client, host, link.key_dir)
                finally:
                    client.close()

            link = AgentLink(
                host.name,
                send_stream=_ChannelWriter(channel),
                recv_stream=channel.makefile("rb"),
                stderr_stream=channel.makefile_stderr("rb"),
                close_transport=close_transport,
                on_event=wiring.on_event,
                heartbeat_interval_s=settings.heartbeat_interval_s,
                heartbeat_timeout_s=settings.heartbeat_timeout_s,
            )
            link.start()
            try:
                link.wait_hello(timeout_s=settings.connect_timeout_s + 20)
            except AgentError:  # say why when the host's Python or its miles-actors is the cause (HostCheckError)
                ssh_up = client.get_transport()
                if ssh_up is not None and ssh_up.is_active():  # else the link closed it: the AgentError says why
                    check_host(client, host, settings.connect_timeout_s + 20, versions=settings.check_versions)
                raise
            return link
        except (paramiko.SSHException, OSError) as exc:
            client.close()
            raise AgentError(f"host {host.name!r}: cannot start the host agent over SSH: {exc}") from None
        except BaseException:
            client.close()
            raise


class _ChannelWriter:
    """Unbuffered writes to an SSH channel (paramiko's buffered file would retry a failed write from its
    finalizer, long after the channel died)."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self._channel = channel

    def write(self, data: bytes) -> int:
        self._channel.sendall(data)
        return len(data)

    def flush(self) -> None:
        pass


def _since(started: float) -> str:
    return f"{time.monotonic() - started:.2f}s"
