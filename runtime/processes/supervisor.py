"""Restart policy of spawned actors: ``spawn(..., max_restarts=N)`` brings a process that exits unexpectedly back
on the same endpoint, its constructor run again (the policy: :class:`Supervisor`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from runtime import metrics
from runtime.caller.client import ClientRuntime
from runtime.caller.connection import Connection
from runtime.core.errors import ActorDied
from runtime.processes.process import ActorProcess
from runtime.processes.spawn_checks import UNLIMITED, check_max_restarts
from transport.security import CurveConfig

if TYPE_CHECKING:
    from runtime.caller.handle import ActorHandle

log = logging.getLogger(__name__)

_BACKOFF_BASE_S = 0.1
_BACKOFF_MAX_S = 5.0

#: Starts a new process for the actor; its argument is the exit callback to register before it runs.
Launch = Callable[[Callable[[int], None]], ActorProcess]
#: Waits for a new process and constructs the actor in it through the given (private) connection, passing the
#: restart count; returns ``__construct__``'s record (boot_id, pid, host, metrics_port, ...).
Construct = Callable[[ActorProcess, int, Connection], Awaitable[dict[str, Any]]]


class Supervisor:
    """Watches one spawned actor's process and restarts it up to ``max_restarts`` times (-1, as in Ray: no limit).

    On an unexpected exit (a signal, a non-zero code) a new process starts on the same endpoint (same port, same
    metrics port) and the constructor runs again with the same keyword arguments. Meanwhile the handle's connection
    holds: calls in flight fail with ActorRestarted (they may or may not have run), calls made during the restart
    wait for the new incarnation. That is the spawner's handle only: any other handle (sent, pickled, from
    ``get_actor``) stays pinned to its incarnation and is refused with ActorRestarted until ``follow_restart()``.
    A failed restart (the process does not come up, the constructor raises) counts as one; a process that dies in
    its constructor counts as an exit, also on the first start. Failing restarts back off (0.1 s doubling to 5 s),
    so an unlimited policy never spins. After ``max_restarts`` the next exit is final: calls fail with ActorDied
    naming every exit code. ``handle.kill(no_restart=False)`` kills the process and lets this policy bring it back.

    Not restarted: an exit after ``handle.kill()``, a clean exit (code 0: ``__shutdown__``, SIGTERM,
    ``exit_actor()``) and exits while this process shuts down. A method raising SystemExit(n) or another
    BaseException exits non-zero (:mod:`runtime.actor.actor_exit`) and is restarted."""

    restarts_actor = True  # its handle follows restarts (runtime.caller.handle.ActorOwner)

    def __init__(
        self,
        *,
        label: str,
        max_restarts: int,
        launch: Launch,
        construct: Construct,
        curve: CurveConfig | None,
        on_restarted: Callable[[ActorHandle], None] | None = None,
    ) -> None:
        """Made before the first incarnation, whose handle holds it (its owner), which :meth:`start_first` starts.
        ``on_restarted(handle)`` runs once a new incarnation is up (naming re-registers it)."""
        check_max_restarts(max_restarts)
        self.handle: ActorHandle | None = None
        self.process: ActorProcess | None = None
        self.label = label
        self.max_restarts = max_restarts
        self.exit_codes: list[int] = []
        self.restarts = 0
        self._launch = launch
        self._construct = construct
        self._curve = curve
        self._on_restarted = on_restarted
        self._runtime = ClientRuntime.get()
        self._lock = threading.Lock()
        self._incarnation = 0
        self._reported: set[int] = set()
        self._stopping = False
        self._restarting = False
        self._bootstrap: Connection | None = None

    async def start_first(
        self, start: Callable[[], ActorProcess], first: Callable[[ActorProcess], Awaitable[ActorHandle]]
    ) -> ActorHandle:
        """Start the first incarnation (``start()``, then ``first(process)`` constructs it and returns its handle,
        which holds this supervisor) and watch it from then on. One whose process dies in its constructor (not one
        that raises: that is the caller's error) is started again while ``max_restarts`` allows, each a restart."""
        while True:
            process = start()
            self._runtime.processes.append(process)
            try:
                handle = await first(process)
                break
            except ActorDied:
                code = await asyncio.get_running_loop().run_in_executor(None, process.wait_exited, 2.0)
                process.kill()
                self._runtime.processes.remove(process)
                if not code or self._budget_spent():
                    raise
                self.exit_codes.append(code)
                self.restarts += 1
                log.warning("actor %s died in its constructor (code %d); starting it again (restart %d)",
                            self.label, code, self.restarts)  # fmt: skip
                await asyncio.sleep(_backoff(self.restarts))
            except BaseException:
                process.kill()
                self._runtime.processes.remove(process)
                raise
        self.handle, self.process = handle, process
        handle.connection.exit_watched = True  # exits are reported here, with the code: not by the link watch
        process.when_exited(self._exit_callback(0))  # at once if it already exited
        return handle

    def stop(self) -> None:
        """Kill the actor for good: no restart follows."""
        with self._lock:
            self._stopping = True
            process = self.process
        if process is not None:
            process.kill()

    def kill_for_restart(self) -> None:
        """Kill the actor's process as a crash would: the restart policy decides what follows."""
        with self._lock:
            process = self.process
        if process is not None:
            process.kill()

    def _budget_spent(self) -> bool:
        return self.max_restarts != UNLIMITED and self.restarts >= self.max_restarts

    def _exit_callback(self, incarnation: int) -> Callable[[int], None]:
        return lambda code: self._on_exit(incarnation, code)

    def _on_exit(self, incarnation: int, code: int) -> None:
        """A process of this actor exited (runs on its watcher thread)."""
        with self._lock:
            if incarnation != self._incarnation or incarnation in self._reported:
                return
            if self._restarting:  # the restart in progress sees it: its connection dies now, _adopt re-checks
                if self._bootstrap is not None:
                    self._runtime.call_soon(self._bootstrap.mark_dead, f"the new process exited with code {code}")
                return
            self._reported.add(incarnation)
            self.exit_codes.append(code)
            what = f"actor process {self.label} (pid {self.process.pid}) exited with code {code}"
            final = self._stopping or self._runtime.closing or code == 0 or self._budget_spent()
            self._restarting = not final
        if final:
            with contextlib.suppress(ValueError):  # the runtime kills only what may still run at shutdown
                self._runtime.processes.remove(self.process)
            if not self._stopping:  # else kill() says why
                self.handle.mark_dead(self._final_reason(what))
            return
        log.warning("%s; restarting it (restart %d of %s)", what, self.restarts + 1, self._budget())
        self._runtime.call_soon(
            self.handle.connection.hold, f"{what}; calls in flight were lost (the actor is being restarted)"
        )
        asyncio.run_coroutine_threadsafe(self._restart(), self._runtime.loop)

    def _budget(self) -> str:
        return "unlimited" if self.max_restarts == UNLIMITED else str(self.max_restarts)

    def _final_reason(self, what: str) -> str:
        if self.max_restarts == 0:
            return what
        codes = ", ".join(map(str, self.exit_codes))
        return f"{what} after {self.restarts} restart(s) (max_restarts={self.max_restarts}); exit codes: {codes}"

    async def _restart(self) -> None:
        try:
            await self._restart_until_settled()
        except Exception as exc:  # a bug here must not leave the handle holding calls forever
            log.exception("restarting actor %s failed unexpectedly", self.label)
            with self._lock:
                self._restarting = False
            self.handle.connection.mark_dead(f"restarting actor {self.label} failed unexpectedly: {exc!r}")

    async def _restart_until_settled(self) -> None:
        """Start incarnations until one is constructed, the budget is spent, or the actor is stopped."""
        failures = 0
        while True:
            if failures:
                await asyncio.sleep(_backoff(failures))
            with self._lock:
                if self._stopping or self._runtime.closing:
                    self._restarting = False
                    return
                self.restarts += 1
                self._incarnation += 1
                attempt, incarnation = self.restarts, self._incarnation
            process: ActorProcess | None = None
            try:
                process = self._start(incarnation)
                bootstrap = self._bootstrap
                try:
                    built = await self._construct(process, attempt, bootstrap)
                finally:
                    bootstrap.close()
            except Exception as exc:  # not started, died, not ready in time, or the constructor raised
                if not self._attempt_failed(incarnation, attempt, exc, process):
                    return
                failures += 1
                continue
            self._adopt(process, incarnation, built)
            return

    def _start(self, incarnation: int) -> ActorProcess:
        with self._lock:
            old = self.process
            self.process = self._launch(self._exit_callback(incarnation))
            self._bootstrap = Connection(
                self._runtime.context, self._runtime.loop_work, self.handle.endpoint, actor=self.label,
                host=self.handle.host, boot_id=None, curve=self._curve,
                server_key=self.process.ticket.server_keys.public,
            )  # fmt: skip
            self._bootstrap.exit_watched = True  # _on_exit reports its death with the exit code
            process = self.process
        processes = self._runtime.processes
        if old in processes:
            processes.remove(old)
        processes.append(process)
        return process

    def _attempt_failed(self, incarnation: int, attempt: int, exc: Exception, process: ActorProcess | None) -> bool:
        """Record a failed restart (``process``: the one started, if any); returns whether to try again."""
        if process is not None:
            process.kill()
        with self._lock:
            if process is not None and incarnation not in self._reported and process.popen.returncode is not None:
                self._reported.add(incarnation)
                self.exit_codes.append(process.popen.returncode)
            again = not (self._stopping or self._runtime.closing or self._budget_spent())
            self._restarting = again
            self._bootstrap = None
            codes = ", ".join(map(str, self.exit_codes))
        detail = getattr(exc, "remote_message", "") or str(exc)  # a constructor's traceback goes to the log only
        reason = f"restart {attempt} of actor {self.label} failed: {detail}"
        log.warning("restart %d of actor %s failed (%s): %s", attempt, self.label, "again" if again else "final", exc)
        if not again and not self._stopping:
            self.handle.connection.mark_dead(
                f"{reason}; gave up after {attempt} restart(s) (max_restarts={self.max_restarts}); exit codes: {codes}"
            )
        return again

    def _adopt(self, process: ActorProcess, incarnation: int, built: dict[str, Any]) -> None:
        handle = self.handle
        assert handle is not None
        handle.now_at(built, spawn_token=process.ticket.token)
        with self._lock:
            self._restarting = False
            self._bootstrap = None
        handle.connection.release(built["boot_id"])
        if self._on_restarted is not None:
            self._on_restarted(handle)
        metrics.runtime_counter(
            "miles_spawned_actor_restarts", "Restarts of actors this process spawned", labels=["actor"]
        ).labels(actor=self.label).inc()
        log.warning(
            "restarted actor %s: pid %d, boot %s (restart %d of %s)",
            self.label,
            process.pid,
            built["boot_id"],
            self.restarts,
            self._budget(),
        )
        code = process.popen.poll()
        if code is not None:  # it died while being adopted: handle that exit as any other
            self._on_exit(incarnation, code)


def _backoff(failures: int) -> float:
    """The wait before the next start after ``failures`` (>= 1) failed ones in a row: 0.1 s doubling to 5 s."""
    return min(_BACKOFF_BASE_S * 2 ** (failures - 1), _BACKOFF_MAX_S)
