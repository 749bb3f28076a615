"""A host agent's command line, and a child process whose pipes carry its JSON lines (the local and srun openers).

If the launcher dies (even kill -9) the child's stdin hits EOF and the agent kills its whole tree; its own session
keeps a terminal Ctrl-C from reaching workers before the launcher tears down in order.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import subprocess
import threading
from collections.abc import Callable

from launcher.config.hosts_config import HostConfig, LauncherSettings
from launcher.errors import AgentError, HostCheckError
from launcher.hosts.agent_link import AgentLink, EventCallback
from launcher.hosts.host_install import agent_missing_package, not_installed

log = logging.getLogger(__name__)


def agent_argv(python: str, host: HostConfig, heartbeat_timeout_s: float) -> list[str]:
    """The command line of a host agent."""
    return [
        python,
        "-m",
        "launcher.agent.host_agent",
        "--host",
        host.name,
        "--workdir",
        str(host.workdir),
        "--heartbeat-timeout",
        f"{heartbeat_timeout_s:g}",
    ]


def agent_shell_command(host: HostConfig, settings: LauncherSettings) -> str:
    """The shell command that starts a host agent on a remote host: in its workdir, with its extra env."""
    argv = agent_argv(host.python, host, settings.heartbeat_timeout_s)
    env = " ".join(shlex.quote(f"{k}={v}") for k, v in host.env.items())
    workdir = shlex.quote(str(host.workdir))
    return f"mkdir -p {workdir} && cd {workdir} && exec env {env} {shlex.join(argv)}"


def open_agent_process(
    host: HostConfig,
    settings: LauncherSettings,
    on_event: EventCallback,
    argv: list[str],
    *,
    env: dict[str, str],
    remove: Callable[[str | None, int | None], None],
) -> AgentLink:
    """Run ``argv`` (a host agent, or a command that runs one on its host, e.g. an ``srun`` step) as a child whose
    pipes carry the JSON lines, and wait for the agent's hello. On close: stdin closed (the agent stops its tree),
    the child waited for (killed past the grace), then ``remove(key_dir, its exit code, None if it was killed)``
    removes keys left behind. The first close does it; a second waits for it."""
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=env,
        )
    except OSError as exc:
        raise HostCheckError(f"host {host.name!r}: cannot run {argv[0]!r}: {exc.strerror or exc}") from None
    assert proc.stdin is not None and proc.stdout is not None

    closing = threading.Lock()  # the heartbeat thread and the teardown may both close: once, the other waits

    def close_transport() -> None:
        with closing:
            if proc.returncode is not None:
                return
            with contextlib.suppress(OSError):
                proc.stdin.close()  # type: ignore[union-attr]
            try:
                proc.wait(timeout=settings.stop_grace_s + 10)
                code: int | None = proc.returncode
            except subprocess.TimeoutExpired:
                log.warning("host %s: agent pid %d did not exit, killing it", host.name, proc.pid)
                proc.kill()
                proc.wait(timeout=5)
                code = None
            remove(link.key_dir, code)  # the agent removes them when it exits; not when it was killed

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
        if agent_missing_package(list(link.stderr_tail)):
            raise not_installed(host) from None
        raise
    return link
