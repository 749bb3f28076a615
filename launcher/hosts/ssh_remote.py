"""SSH to a host with paramiko: connect with errors that name the host and the fix, run a command with a deadline,
probe the host's Python and miles-actors install, remove a launch's keys there. The SSH agent opener
(launcher/hosts/ssh_opener.py), ``miles-launch down``/``status`` and ``logs`` use it."""

from __future__ import annotations

import json
import logging
import shlex
import time
from pathlib import Path

import paramiko

from launcher.config.hosts_config import HostConfig
from launcher.errors import HostAuthError, HostCheckError, HostUnreachable
from launcher.hosts.agent_pool import launcher_versions
from launcher.hosts.host_install import not_installed

log = logging.getLogger(__name__)

_PROBE = (
    "import json, platform, sys, importlib.util as u\n"
    "try:\n    from importlib.metadata import version; v = version('miles-actors')\n"
    "except Exception:\n    v = None\n"
    "try:\n    a = u.find_spec('launcher.agent.host_agent') is not None\n"
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
