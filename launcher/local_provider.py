"""LocalProvider: the host agent runs as a local subprocess; pipes carry the JSON lines.

If the launcher dies (even kill -9) the agent's stdin hits EOF and it kills its whole tree; its own session
keeps a terminal Ctrl-C from reaching workers before the launcher tears down in order.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess

from launcher.agent_link import AgentLink, EventCallback
from launcher.curve_keys import remove_keys
from launcher.errors import AgentError, HostCheckError
from launcher.hosts_config import HostConfig, LauncherSettings
from launcher.provider_base import BaseWorkerProvider

log = logging.getLogger(__name__)


def agent_argv(python: str, host: HostConfig, heartbeat_timeout_s: float) -> list[str]:
    """The command line of a host agent."""
    return [
        python,
        "-m",
        "launcher.host_agent",
        "--host",
        host.name,
        "--workdir",
        str(host.workdir),
        "--heartbeat-timeout",
        f"{heartbeat_timeout_s:g}",
    ]


class LocalProvider(BaseWorkerProvider):
    """Runs every host's agent on this machine (hosts must use ``provider = "local"``)."""

    def _open_agent(self, host: HostConfig) -> AgentLink:
        if host.provider != "local":
            raise HostCheckError(f"host {host.name!r}: LocalProvider only runs provider='local' hosts")
        return open_local_agent(host, self.settings, self._events.on_event)


def open_local_agent(host: HostConfig, settings: LauncherSettings, on_event: EventCallback) -> AgentLink:
    """Start ``python -m launcher.host_agent`` for ``host`` as a child process and wait for its hello; its events
    go to ``on_event``."""
    python = host.python
    argv = agent_argv(python, host, settings.heartbeat_timeout_s)
    try:
        host.workdir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, **host.env},
        )
    except OSError as exc:
        raise HostCheckError(f"host {host.name!r}: cannot run {python!r}: {exc.strerror or exc}") from None
    assert proc.stdin is not None and proc.stdout is not None

    def close_transport() -> None:
        with contextlib.suppress(OSError):
            proc.stdin.close()  # type: ignore[union-attr]
        try:
            proc.wait(timeout=settings.stop_grace_s + 10)
        except subprocess.TimeoutExpired:
            log.warning("host %s: agent pid %d did not exit, killing it", host.name, proc.pid)
            proc.kill()
            proc.wait(timeout=5)
        remove_keys(link.key_dir)  # the agent removes them when it exits; not when it was killed

    link = AgentLink(
        host.name,
        send_stream=proc.stdin,
        recv_stream=proc.stdout,
        stderr_stream=proc.stderr,
        close_transport=close_transport,
        on_event=on_event,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        heartbeat_timeout_s=settings.heartbeat_timeout_s,
    )
    link.start()
    try:
        link.wait_hello(timeout_s=settings.connect_timeout_s + 20)
    except AgentError:
        proc.kill()
        proc.wait(timeout=5)
        raise
    return link
