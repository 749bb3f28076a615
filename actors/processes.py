"""Child processes that die with their parent: one long-lived forking thread, PR_SET_PDEATHSIG, group stop.

An engine or router must die when the controller's process dies (even by SIGKILL), and not before.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from runtime.internals import die_with_parent_preexec
from transport.ports import free_ports

logger = logging.getLogger(__name__)

T = TypeVar("T")
POLL_S = 0.05


_handed_out: set[int] = set()  # never the same port twice from this process


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now, for another process to bind (a rank's rendezvous, an engine, a router):
    drawn below the kernel's ephemeral range (transport.ports), where no ``bind(0)`` or outgoing connection can
    take it meanwhile (CI: a trainer group's rendezvous port from that range was taken, and its ranks hung)."""
    return free_ports(1, _handed_out, host=host)[0]


class Spawner:
    """Runs process-starting code on one long-lived thread, which lives until :meth:`close`.

    Linux sends the PR_SET_PDEATHSIG signal when the *thread* that forked the child exits, not the process: forked
    from a passing thread, a child would die with that thread."""

    def __init__(self, name: str = "spawner") -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self.preexec = die_with_parent_preexec()

    async def run(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``function`` on the spawner thread (it may block: starts are serialised)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(function, *args, **kwargs))

    async def popen(
        self,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in its own session, stdout and stderr appended to ``log_path``, dying with us."""

        def start() -> subprocess.Popen[bytes]:
            with log_path.open("ab") as log:
                return subprocess.Popen(
                    list(argv),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # process group = pid: the whole group can be stopped
                    preexec_fn=self.preexec,  # forked from the spawner thread only
                    env=dict(env) if env is not None else None,
                    cwd=cwd,
                )

        return await self.run(start)

    def close(self) -> None:
        """Stop the thread; children started here then get SIGKILL: stop them first."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def exit_code(proc: subprocess.Popen[bytes]) -> int | None:
    """The exit code once ``proc`` has exited (None while it runs); what is left of its group is killed first.

    The leader is checked without being reaped (``WNOWAIT``), so its pid, the group id, cannot be reused
    while we signal the group.
    """
    if proc.returncode is not None:
        return proc.returncode
    if not _exited_unreaped(proc.pid):
        return None
    _signal_group(proc.pid, signal.SIGKILL)
    return proc.wait(timeout=5.0)


def terminate_group(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """SIGTERM the child's group, wait up to ``timeout_s``, then SIGKILL it; returns the exit code."""
    if proc.returncode is not None:
        return proc.returncode
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while not _exited_unreaped(proc.pid) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    _signal_group(proc.pid, signal.SIGKILL)  # the leader if it ignored SIGTERM, and any stragglers
    try:
        return proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        logger.error("process group %d survived SIGKILL", proc.pid)
        return None


def kill_group(proc: subprocess.Popen[bytes]) -> int | None:
    """SIGKILL the child's group now and reap the leader."""
    return terminate_group(proc, timeout_s=0.0)


def log_tail(path: Path | None, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file, or '' when there is none."""
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _exited_unreaped(pid: int) -> bool:
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def advertised_host() -> str:
    """The address other hosts reach this one at: ``MILES_ADVERTISE_HOST`` (set by the launcher) or loopback."""
    return os.environ.get("MILES_ADVERTISE_HOST") or "127.0.0.1"
