"""An actor process the launch placed for this process on one of its hosts: its exit comes from the launcher (a
long poll), and killing it releases its lease (the host's agent stops the process)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable

from runtime.caller.client import ClientRuntime
from runtime.placement.placement_api import PlacementUnavailable, call
from runtime.placement.placement_types import ExitReport, Started

log = logging.getLogger(__name__)

EXIT_POLL_S = 30.0  # one wait_exit long poll
UNREACHABLE_S = 60.0  # the placement API silent this long: the actor is taken for gone (the launch ended)
KILL_WAIT_S = 10.0


class PlacedProcess:
    """What a spawner knows of a placed actor's process: pid, host, its exit (``when_exited``, ``wait_exited``,
    ``exit_report``, as :class:`runtime.processes.process.ActorProcess`), and ``kill()``; its handle's owner
    (runtime.caller.handle.ActorOwner): a placed actor is not restarted."""

    restarts_actor = False

    def __init__(self, started: Started, *, label: str, owner: str) -> None:
        self.lease_id = started.lease_id
        self.pid = started.pid
        self.host = started.host
        self.label = label
        self.exit_code: int | None = None
        self.report: ExitReport | None = None
        self._owner = owner
        self._lock = threading.Lock()
        self._exited = threading.Event()
        self._on_exit: list[Callable[[int], None]] = []
        self._killed = False
        ClientRuntime.get().call_soon(self._start_watch)

    def when_exited(self, callback: Callable[[int], None]) -> Callable[[], None]:
        """Call ``callback(code)`` when the process exits (at once, here, if it has); returns its remover."""
        with self._lock:
            code = self.exit_code
            if code is None:
                self._on_exit.append(callback)
        if code is not None:
            callback(code)

        def remove() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._on_exit.remove(callback)

        return remove

    def wait_exited(self, timeout_s: float) -> int | None:
        """The exit code once the exit is reported, or None after ``timeout_s``."""
        return self.exit_code if self._exited.wait(timeout_s) else None

    def exit_report(self, code: int, when: str = "") -> str:
        """``actor NAME (lease rt-N, pid P) on HOST exited with code C[ when]``, then its last output lines."""
        if self.report is None:
            return f"actor {self.label} (lease {self.lease_id}, pid {self.pid}) on {self.host} exited with code {code}"
        return self.report.model_copy(update={"reason": self.report.reason + when}).describe()

    @property
    def process(self) -> PlacedProcess:
        return self

    def stop(self) -> None:
        """Stop the actor for good (:meth:`kill`)."""
        self.kill()

    def kill_for_restart(self) -> None:
        raise ValueError(f"actor {self.label} is placed by the launch and has no restart policy")

    def kill(self) -> None:
        """Release the lease: the host's agent kills the process tree, its resources return to the launch."""
        self._killed = True
        runtime = ClientRuntime.get()
        if runtime.on_loop_thread():  # an async caller: the release goes on without blocking the loop
            _keep(asyncio.ensure_future(self._release()))
            return
        try:
            runtime.run(self._release(), timeout_s=KILL_WAIT_S + 5.0, what=f"kill {self.label}")
        except Exception as exc:  # the launch is gone: so is the actor
            log.warning("releasing %s (lease %s): %s", self.label, self.lease_id, exc)

    async def _release(self) -> None:
        await call("release", lease_id=self.lease_id, owner=self._owner)

    def _start_watch(self) -> None:
        _keep(asyncio.ensure_future(self._watch()))

    async def _watch(self) -> None:
        silent_since: float | None = None
        while True:
            try:
                report = await call("wait_exit", lease_id=self.lease_id, wait_s=EXIT_POLL_S)
                silent_since = None
            except PlacementUnavailable as exc:
                silent_since = silent_since or time.monotonic()
                if time.monotonic() - silent_since < UNREACHABLE_S:
                    await asyncio.sleep(1.0)
                    continue
                report = ExitReport(
                    lease_id=self.lease_id, label=self.label, host=self.host, pid=self.pid, returncode=None,
                    signal=None, reason=f"is out of reach: the launch's placement API stopped answering ({exc})",
                )  # fmt: skip
            if report is not None:
                self._exit(report)
                return

    def _exit(self, report: ExitReport) -> None:
        with self._lock:
            self.report = report
            self.exit_code = report.returncode if report.returncode is not None else -9
            callbacks, self._on_exit = self._on_exit, []
        self._exited.set()
        for callback in callbacks:
            callback(self.exit_code)


_tasks: set[asyncio.Future[None]] = set()


def _keep(task: asyncio.Future[None]) -> None:
    """Hold a background task until it is done (the loop keeps only weak references)."""
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)
