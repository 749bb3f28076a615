"""SSHProvider: one paramiko connection per host; runs ``python -m launcher.host_agent`` over an exec channel and
speaks JSON lines over it. The agent's hello carries the host's Python and miles-actors versions (checked by the
provider); only when the agent does not start is the host probed, to say why (no Python, no miles-actors).

Hosts with ``provider = "local"`` in the same hosts.toml get a local agent (see local_provider). When the
launcher dies the TCP connection drops, sshd closes the channel, and the agent (stdin EOF) kills its tree; a
partition that keeps the connection half-open is caught by the agent's heartbeat timeout.
"""

from __future__ import annotations

import json
import logging
import shlex
import time
from pathlib import Path
from typing import Any

import paramiko

from launcher.agent_link import AgentLink
from launcher.agent_pool import launcher_versions
from launcher.errors import AgentError, HostAuthError, HostCheckError, HostUnreachable
from launcher.host_install import not_installed
from launcher.hosts_config import ClusterConfig, HostConfig
from launcher.launch_log import LOG_NAME
from launcher.local_provider import agent_shell_command, open_local_agent
from launcher.provider_base import BaseWorkerProvider

log = logging.getLogger(__name__)

_PROBE = (
    "import json, platform, sys, importlib.util as u\n"
    "try:\n    from importlib.metadata import version; v = version('miles-actors')\n"
    "except Exception:\n    v = None\n"
    "try:\n    a = u.find_spec('launcher.host_agent') is not None\n"
    "except Exception:\n    a = False\n"
    "print(json.dumps({'python': platform.python_version(), 'executable': sys.executable, 'package': v,"
    " 'agent': a}))"
)


def ssh_connect(host: HostConfig, timeout_s: float, *, log_file: Path | None = None) -> paramiko.SSHClient:
    """Connect and authenticate; HostUnreachable / HostAuthError name the host within ``timeout_s`` (and
    ``log_file``, where paramiko's own traceback of a failed handshake went)."""
    ssh = host.ssh
    where = f"host {host.name!r} ({ssh.user}@{host.address}:{ssh.port})"
    if ssh.key_file is not None and not ssh.key_file.is_file():
        raise HostAuthError(f"{where}: SSH key file {ssh.key_file} does not exist (hosts.toml ssh.key_file)")
    client = paramiko.SSHClient()
    try:
        client.load_system_host_keys()
    except OSError:
        pass
    if ssh.known_hosts is not None:
        client.load_host_keys(str(ssh.known_hosts))
    policy = paramiko.RejectPolicy() if ssh.host_key_policy == "reject" else paramiko.AutoAddPolicy()
    client.set_missing_host_key_policy(policy)
    started = time.monotonic()
    try:
        client.connect(
            hostname=host.address,
            port=ssh.port,
            username=ssh.user,
            key_filename=str(ssh.key_file) if ssh.key_file else None,
            look_for_keys=ssh.key_file is None,
            allow_agent=ssh.key_file is None,
            timeout=timeout_s,
            banner_timeout=timeout_s,
            auth_timeout=timeout_s,
            channel_timeout=timeout_s,
        )
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise HostAuthError(
            f"{where}: host key mismatch ({exc}); the host was reinstalled or is not who it says"
        ) from None
    except paramiko.AuthenticationException as exc:
        client.close()
        key = ssh.key_file or "ssh-agent/default keys"
        raise HostAuthError(
            f"{where}: SSH authentication failed with key {key} ({exc}); add its public key to "
            f"~{ssh.user}/.ssh/authorized_keys on the host or fix hosts.toml ssh.key_file/ssh.user"
        ) from None
    except TimeoutError:
        client.close()
        raise HostUnreachable(
            f"{where}: no answer within {timeout_s:g}s (connect timeout); check the address, port and firewall"
        ) from None
    except paramiko.SSHException as exc:
        client.close()
        elapsed = time.monotonic() - started
        if "known_hosts" in str(exc) or "not found in known_hosts" in str(exc):
            raise HostAuthError(f"{where}: unknown host key and host_key_policy = 'reject': {exc}") from None
        raise HostUnreachable(
            f"{where}: SSH handshake failed after {elapsed:.1f}s: {exc}; is an SSH server listening on that port?"
            + (f" (paramiko's traceback: {log_file})" if log_file else "")
        ) from None
    except OSError as exc:
        client.close()
        raise HostUnreachable(f"{where}: cannot connect: {exc.strerror or exc}") from None
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(5)
    return client


def run_remote(client: paramiko.SSHClient, command: str, timeout_s: float) -> tuple[int, str, str]:
    """Run a command over an exec channel; (exit code, stdout, stderr); TimeoutError past ``timeout_s``."""
    stdin, stdout, stderr = client.exec_command(command, timeout=timeout_s)
    stdin.close()  # nothing to send (and no flush from its finalizer once the connection is gone)
    channel = stdout.channel
    deadline = time.monotonic() + timeout_s
    while not channel.exit_status_ready():
        if time.monotonic() > deadline:
            channel.close()
            raise TimeoutError(f"{command!r} did not finish within {timeout_s:g}s")
        time.sleep(0.02)
    return (
        channel.recv_exit_status(),
        stdout.read().decode(errors="replace"),
        stderr.read().decode(errors="replace"),
    )


def check_host(client: paramiko.SSHClient, host: HostConfig, timeout_s: float, *, versions: bool) -> dict:
    """Probe the host's Python and miles-actors install (run when its agent does not start, to say why);
    HostCheckError says what is wrong on which host."""
    env = " ".join(shlex.quote(f"{k}={v}") for k, v in host.env.items())
    command = f"env {env} {shlex.quote(host.python)} -c {shlex.quote(_PROBE)}"
    try:
        code, out, err = run_remote(client, command, timeout_s)
    except (TimeoutError, paramiko.SSHException, OSError) as exc:
        raise HostCheckError(f"host {host.name!r}: probing {host.python} failed: {exc}") from None
    if code != 0:
        raise HostCheckError(
            f"host {host.name!r}: cannot run {host.python!r} (exit {code}): {err.strip()[-300:]}; "
            "fix hosts.toml `python` for this host"
        )
    info = json.loads(out.strip().splitlines()[-1])
    python, package = launcher_versions()
    if info["package"] is None or not info["agent"]:
        raise not_installed(host, info["executable"])
    if versions and info["python"].split(".")[:2] != python.split(".")[:2]:
        raise HostCheckError(
            f"host {host.name!r}: {host.python} is Python {info['python']}, the launcher runs {python}; "
            "use the same Python minor version on every host"
        )
    if versions and info["package"] != package:
        raise HostCheckError(
            f"host {host.name!r}: miles-actors {info['package']} is installed, the launcher has {package}; "
            "install the same version on every host"
        )
    return info


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


def remove_remote_keys(client: paramiko.SSHClient, host: HostConfig, key_dir: str | None) -> None:
    """``rm -rf`` the launch's key directory on ``host`` (the agent already did unless it was killed)."""
    transport = client.get_transport()
    if key_dir is None or transport is None or not transport.is_active():
        return
    try:
        code, _, err = run_remote(client, f"rm -rf -- {shlex.quote(key_dir)}", timeout_s=5.0)
    except (TimeoutError, paramiko.SSHException, OSError) as exc:
        log.warning("host %s: could not remove the CURVE keys %s: %s", host.name, key_dir, exc)
        return
    if code != 0:
        log.warning("host %s: could not remove the CURVE keys %s: %s", host.name, key_dir, err.strip()[-300:])


class SSHProvider(BaseWorkerProvider):
    """Runs a host agent on every ``provider = "ssh"`` host over SSH (and locally for ``"local"`` hosts)."""

    def _open_agent(self, host: HostConfig) -> AgentLink:
        if host.provider == "local":
            return open_local_agent(host, self.settings, self._events.on_event)
        settings = self.settings
        started = time.monotonic()
        client = ssh_connect(host, settings.connect_timeout_s, log_file=settings.workdir / LOG_NAME)
        try:
            transport = client.get_transport()
            assert transport is not None
            self.services.reach_back[host.name] = str(transport.sock.getsockname()[0])
            self._say(f"host {host.name}: SSH {host.ssh.user}@{host.address}:{host.ssh.port} in {_since(started)}")
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
                on_event=self._events.on_event,
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


def _since(started: float) -> str:
    return f"{time.monotonic() - started:.2f}s"


def make_provider(config: ClusterConfig, **kwargs: Any) -> BaseWorkerProvider:
    """SlurmProvider for a ``[cluster] provider = "slurm"`` file, LocalProvider when every host is local, else
    SSHProvider."""
    from launcher.local_provider import LocalProvider
    from launcher.slurm_provider import SlurmProvider

    if config.cluster is not None:
        return SlurmProvider(config, **kwargs)
    if all(h.provider == "local" for h in config.hosts):
        return LocalProvider(config, **kwargs)
    return SSHProvider(config, **kwargs)
