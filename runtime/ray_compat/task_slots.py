"""The CPUs a session's tasks hold while they run: ``@ray.remote(num_cpus=2)`` tasks run at most total / 2 at once,
as Ray limits heavy tasks (docs.ray.io ray-core/patterns/limit-running-tasks.html)."""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from concurrent.futures import Future
from typing import Any

from runtime.ray_compat.calls import Arguments


class TaskSlots:
    """``total`` CPUs, granted in order of asking.

    A task whose arguments are there asks for its CPUs (``reserve``), first come first served, and is sent when
    they are granted; its CPUs are given back when it settles (a retry keeps them). A call cancelled while it waits
    never holds any. Actors' ``num_cpus`` are held in the session's ledger, not here."""

    def __init__(self, total: float) -> None:
        self.total = total
        self.free = total
        self._waiting: collections.deque[tuple[float, concurrent.futures.Future[None]]] = collections.deque()
        self._lock = threading.Lock()

    def try_reserve(self, cpus: float) -> bool:
        """Take ``cpus`` now if nobody waits and they are free."""
        with self._lock:
            if self._waiting or cpus > self.free:
                return False
            self.free -= cpus
            return True

    def reserve(self, cpus: float) -> concurrent.futures.Future[None]:
        """A future done once ``cpus`` are this caller's (give them back with :meth:`release`)."""
        granted: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._lock:
            self._waiting.append((cpus, granted))
            ready = self._grant()
        _set_all(ready)
        return granted

    def release(self, cpus: float) -> None:
        with self._lock:
            self.free = min(self.total, self.free + cpus)
            ready = self._grant()
        _set_all(ready)

    def close(self, error: BaseException) -> None:
        """Fail every call still waiting for CPUs with ``error`` (``ray.shutdown``): none is left hanging."""
        with self._lock:
            waiting, self._waiting = list(self._waiting), collections.deque()
        for _, granted in waiting:
            granted.set_exception(error)

    def _grant(self) -> list[concurrent.futures.Future[None]]:
        ready = []
        while self._waiting and self._waiting[0][0] <= self.free:
            cpus, granted = self._waiting.popleft()
            self.free -= cpus
            ready.append(granted)
        return ready


def _set_all(futures: list[concurrent.futures.Future[None]]) -> None:
    for future in futures:
        future.set_result(None)  # outside the lock: its callbacks send the task


class CpuHold:
    """One call's CPUs (:class:`TaskSlots`): asked for once its arguments are there,
    held until it settles; granted to a call that was cancelled meanwhile, they go straight back."""

    def __init__(self, slots: TaskSlots, cpus: float) -> None:
        self.slots, self.cpus = slots, cpus
        self._state = "waiting"  # -> "held" -> "released", or -> "abandoned" (settled before the grant)
        self._lock = threading.Lock()

    def when_granted(self, arguments: Arguments | Future[Arguments]) -> Arguments | Future[Arguments]:
        """The arguments once they are there and the CPUs are this call's (at once when both are)."""
        if not isinstance(arguments, Future) and self.slots.try_reserve(self.cpus):
            self._state = "held"
            return arguments
        ready: Future[Arguments] = Future()

        def ask(values: Arguments) -> None:
            self.slots.reserve(self.cpus).add_done_callback(lambda grant: self._granted(ready, values, grant))

        def arrived(future: Future[Arguments]) -> None:
            if future.exception() is not None:
                ready.set_exception(future.exception())  # type: ignore[arg-type]
            else:
                ask(future.result())

        if isinstance(arguments, Future):
            arguments.add_done_callback(arrived)
        else:
            ask(arguments)
        return ready

    def _granted(self, ready: Future[Arguments], values: Arguments, grant: Future[None]) -> None:
        if grant.exception() is not None:  # the session ended first: nothing was taken
            ready.set_exception(grant.exception())  # type: ignore[arg-type]
            return
        with self._lock:
            abandoned = self._state == "abandoned"
            self._state = "released" if abandoned else "held"
        if abandoned:
            self.slots.release(self.cpus)
        else:
            ready.set_result(values)

    def settled(self, _: Future[Any]) -> None:
        with self._lock:
            held = self._state == "held"
            self._state = "released" if held else "abandoned"
        if held:
            self.slots.release(self.cpus)
