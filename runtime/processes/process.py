"""A local actor process: readiness handshake, log forwarding, exit watching."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from runtime.core import control_auth
from runtime.core.errors import ActorDied, DeadlineExceeded
from runtime.processes import driver_fork
from runtime.processes.driver_fork import child_environment
from runtime.processes.fork_client import ForkedWorker
from transport import shared_memory
from transport.security import ServerKeys
from transport.timeouts import within

log = logging.getLogger(__name__)

#: The pid of the process an actor process lives no longer than: its spawner, or for a detached actor the one
#: its spawner itself lives no longer than (so a detached actor outlives its owner, not the driver or launch).
LIFETIME_PID_ENV = "MILES_LIFETIME_PID"
#: The line an actor process prints on stdout once its socket is bound.
READY_PREFIX = "MILES_ACTOR_READY "
#: How many of its last output lines are kept per process, and how many a death report shows.
KEPT_LINES = 50
REPORTED_LINES = 10
_OUTPUT_EOF_WAIT_S = 0.5  # after an exit, how long the report waits for the last output to be read


def describe_exit(code: int) -> str:
    """``exited with code 3``, or ``exited with code -9 (killed by SIGKILL)``."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"exited with code {code} (killed by {name})"


def worker_command(
    bind: str,
    *,
    python: str = sys.executable,
    parent_pid: int | None = None,
    metrics_port: int | None = 0,
    watch_pid: int | None = None,
) -> list[str]:
    """argv that starts an empty actor process bound to ``bind``; ``metrics_port=None``: no /metrics.
    ``parent_pid``: it dies with its parent, that process; ``watch_pid``: it exits when that process (not its
    parent) is gone."""
    argv = [python, "-m", "runtime.worker", "--bind", bind]
    if watch_pid:
        argv += ["--watch-pid", str(watch_pid)]
    if metrics_port is None:
        argv.append("--no-metrics")
    elif metrics_port:
        argv += ["--metrics-port", str(metrics_port)]
    return [*argv, "--parent-pid", str(parent_pid)] if parent_pid else argv


class ActorProcess:
    """One spawned actor process.

    The child runs ``python -m runtime.worker`` (forked by this process's fork server,
    :mod:`runtime.processes.driver_fork`, or else started with subprocess) in its own process group, dies with us
    (PR_SET_PDEATHSIG plus a parent watch), reads its spawn token from its stdin (:mod:`runtime.core.control_auth`)
    and prints one ready line; everything else it prints is forwarded to our stderr with a ``(name pid=N)`` prefix,
    and its last lines are kept, so a death (say inside its constructor) is reported with them. A watcher thread
    reports the exit code the moment the process ends."""

    def __init__(
        self,
        label: str,
        *,
        env: dict[str, str] | None = None,
        bind: str = "tcp://127.0.0.1:0",
        cwd: str | None = None,
        metrics_port: int | None = 0,
        on_exit: list[Callable[[int], None]] | None = None,
        server_keys: ServerKeys | None = None,
        detached: bool = False,
    ) -> None:
        """``detached``: the process does not die with this one, but with the one this process lives no longer
        than (``MILES_LIFETIME_PID``; this process itself when it has none: a driver's actors die with it)."""
        self.label = label
        self.on_exit: list[Callable[[int], None]] = list(on_exit or [])  # called with the exit code
        self._ready: dict[str, Any] | None = None
        self._ready_event = threading.Event()
        self._ready_waiters: list[Callable[[], None]] = []  # called once, when _ready_event is set
        self.recent_output: collections.deque[str] = collections.deque(maxlen=KEPT_LINES)
        self._output_done = threading.Event()
        self._exit_lock = threading.Lock()
        self._exited = threading.Event()
        self.exit_code: int | None = None  # set (with the output read to its end, or nearly) before on_exit runs
        # Its token proves our control calls to it; its keys are the actor's own (``server_keys``: kept from the
        # process it replaces, so handles stay valid). The ticket goes to its stdin and nowhere else.
        self.ticket = control_auth.SpawnTicket.new(server_keys)
        if detached:
            lifetime_pid = int(os.environ.get(LIFETIME_PID_ENV) or os.getpid())
            argv = worker_command(bind, metrics_port=metrics_port, watch_pid=lifetime_pid)
        else:
            lifetime_pid = os.getpid()
            argv = worker_command(bind, parent_pid=lifetime_pid, metrics_port=metrics_port)
        full_env = child_environment({**(env or {}), LIFETIME_PID_ENV: str(lifetime_pid)})
        self.popen: subprocess.Popen[str] | ForkedWorker = driver_fork.fork_worker(
            argv, full_env, cwd
        ) or subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
            text=True,
            bufsize=1,
        )
        self.pid = self.popen.pid
        assert self.popen.stdin is not None
        with contextlib.suppress(OSError):  # it died at once: the watcher reports that
            self.popen.stdin.write(self.ticket.line())
            self.popen.stdin.close()
        threading.Thread(target=self._forward_output, name=f"out-{label}", daemon=True).start()
        threading.Thread(target=self._watch, name=f"wait-{label}", daemon=True).start()

    def _forward_output(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            if self._ready is None and line.startswith(READY_PREFIX):
                self._ready = json.loads(line[len(READY_PREFIX) :])
                self._set_ready()
                continue
            self.recent_output.append(line.rstrip("\n"))
            sys.stderr.write(f"({self.label} pid={self.pid}) {line}")
        with contextlib.suppress(OSError):
            self.popen.stdout.close()  # a driver that outlives thousands of actors keeps no pipe of theirs
        self._output_done.set()
        self._set_ready()  # EOF: the process is gone

    def _watch(self) -> None:
        code = self.popen.wait()
        self._output_done.wait(_OUTPUT_EOF_WAIT_S)  # its last lines belong in the report
        shared_memory.remove_files_of(self.pid)  # a killed process cannot remove its own
        with self._exit_lock:
            self.exit_code = code
            callbacks = list(self.on_exit)
        self._exited.set()
        self._set_ready()
        for callback in callbacks:
            callback(code)

    def when_exited(self, callback: Callable[[int], None]) -> Callable[[], None]:
        """Call ``callback(code)`` when the process exits (at once, here, if it has); returns its remover."""
        with self._exit_lock:
            code = self.exit_code
            if code is None:
                self.on_exit.append(callback)
        if code is not None:
            callback(code)

        def remove() -> None:
            with self._exit_lock, contextlib.suppress(ValueError):
                self.on_exit.remove(callback)

        return remove

    def wait_exited(self, timeout_s: float) -> int | None:
        """The exit code once the process has exited and its exit is reported, or None after ``timeout_s``."""
        return self.exit_code if self._exited.wait(timeout_s) else None

    def exit_report(self, code: int, when: str = "") -> str:
        """``actor process NAME (pid N) exited with code C[ when]``, then its last output lines."""
        report = f"actor process {self.label} (pid {self.pid}) {describe_exit(code)}{when}"
        lines = list(self.recent_output)[-REPORTED_LINES:]
        if not lines:
            return f"{report}; it printed nothing"
        return f"{report}; its last output:\n" + "\n".join(f"  | {line}" for line in lines)

    def _set_ready(self) -> None:
        with self._exit_lock:
            self._ready_event.set()
            waiters, self._ready_waiters = self._ready_waiters, []
        for wake in waiters:
            wake()

    async def wait_ready_async(self, deadline_s: float) -> dict[str, Any]:
        """:meth:`wait_ready` on the event loop: no thread waits while the process starts."""
        loop = asyncio.get_running_loop()
        woke = loop.create_future()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(lambda: woke.done() or woke.set_result(None))

        with self._exit_lock:
            if self._ready_event.is_set():
                woke.set_result(None)
            else:
                self._ready_waiters.append(wake)
        with contextlib.suppress(TimeoutError):
            await within(woke, deadline_s)
        if self._ready is not None:
            return self._ready
        # A death or a timeout: its report (which may wait a little for the exit) off the loop.
        return await loop.run_in_executor(None, self._ready_or_raise, self._ready_event.is_set(), deadline_s)

    def wait_ready(self, deadline_s: float) -> dict[str, Any]:
        """The ready line's fields (endpoint, boot_id, pid, host, metrics_port); raises if it dies or is too slow."""
        return self._ready_or_raise(self._ready_event.wait(deadline_s), deadline_s)

    def _ready_or_raise(self, woke: bool, deadline_s: float) -> dict[str, Any]:
        if not woke or self._ready is None:
            code = self.popen.poll()
            if woke and code is None:  # its output ended: it is exiting (poll says None while the watcher waits)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = self.popen.wait(2.0)
            if code is not None:
                self._output_done.wait(_OUTPUT_EOF_WAIT_S)
                raise ActorDied(self.exit_report(code, " before it was ready"))
            self.kill()
            raise DeadlineExceeded(
                f"actor process {self.label} (pid {self.pid}) was not ready within {deadline_s} s; it was killed"
            )
        return self._ready

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self, wait_s: float = 5.0) -> None:
        """SIGKILL the process group and reap it."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + wait_s
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(max(0.0, deadline - time.monotonic()))
