"""Where one actor server runs the calls it accepts: its thread lanes, async slots and group loops."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from runtime.actor.call_store import CallRecord
from runtime.actor.group_loops import GroupLoop
from runtime.actor.lanes import ThreadLane
from runtime.core.metadata import DEFAULT_ASYNC_CONCURRENCY, DEFAULT_GROUP, ActorClassInfo
from transport.waker import Waker

CONSTRUCT_LANE = "__construct__"
COLLECTIVE_LANE = "__collective__"  # collective joins and tensor sends (runtime.tensors), beside methods
COLLECTIVE_THREADS = 4  # so several receivers pull at once, and a join never waits behind a send
BUILTIN_LANES = (CONSTRUCT_LANE, COLLECTIVE_LANE)


class ServerLanes:
    """The lanes of one server. Each opens with ``deliver``, which records and sends a finished sync call (on the
    lane's thread).

    Each concurrency group of the actor's class gets a thread lane for its sync methods (:mod:`runtime.actor.lanes`)
    and, when the class has async methods, a semaphore of slots (how many of its coroutines run at once) and an
    event loop of its own (:mod:`runtime.actor.group_loops`). The constructor (and ``__prepare__``) runs on its own
    lane, :data:`CONSTRUCT_LANE`, open from the start. Call routing (:mod:`runtime.actor.call_routing`) reads the
    three tables directly, once per call: they are filled in place, never replaced."""

    def __init__(self) -> None:
        self.threads: dict[str, ThreadLane] = {}  # sync methods, by group (and the constructor's lane)
        self.async_slots: dict[str, asyncio.Semaphore] = {}  # how many coroutines of each group run at once
        self.group_loops: dict[str, GroupLoop] = {}  # where each group's async methods run

    def open_construct_lane(self, deliver: Callable[[Any], None]) -> None:
        self.threads[CONSTRUCT_LANE] = ThreadLane("construct", 1, deliver)
        self.threads[COLLECTIVE_LANE] = ThreadLane("collective", COLLECTIVE_THREADS, deliver)

    def open(
        self,
        info: ActorClassInfo,
        actor: str,
        max_concurrency: int | None,
        deliver: Callable[[Any], None],
        idle_receive: Callable[[Waker], bool],
    ) -> None:
        """Open the lanes of the actor class ``info``.

        ``max_concurrency`` (as Ray's): for an actor without async methods (a threaded actor), the default group's
        thread count, so that many default-lane calls run in parallel; for an async actor, how many of its
        default-group coroutines run at once (1000 when not given)."""
        # The default lane's idle thread reads the socket itself (``idle_receive``), so a call for it runs with no
        # hand-off (in an actor whose default-group methods are all async, that would only add one).
        lane_reads = any(
            not m.is_async and not m.options.control_plane and m.options.concurrency_group == DEFAULT_GROUP
            for m in info.methods.values()
        )
        threaded = max_concurrency is not None and not info.has_async_methods
        for group, threads in info.concurrency_groups.items():
            if threaded and group == DEFAULT_GROUP:
                threads = max_concurrency
            reader = idle_receive if group == DEFAULT_GROUP and lane_reads else None
            self.threads[group] = ThreadLane(group, threads, deliver, idle_receive=reader)
            slots = (max_concurrency or DEFAULT_ASYNC_CONCURRENCY) if group == "default" else threads
            self.async_slots[group] = asyncio.Semaphore(slots)
            if info.has_async_methods:  # any group may run an async method (options(concurrency_group=...))
                self.group_loops[group] = GroupLoop(group, actor)

    def load(self) -> dict[str, tuple[int, int]]:
        """(running, queued) per lane; async tasks count as running. Safe to call from any thread."""
        threads = list(self.threads.items())
        lanes = {name: (lane.busy, lane.queued) for name, lane in threads if name not in BUILTIN_LANES}
        lanes["async"] = (self._async_running(), 0)
        return lanes

    def in_flight(self) -> dict[str, int]:
        """Calls running or queued, per lane."""
        return {name: running + queued for name, (running, queued) in self.load().items()}

    def _async_running(self) -> int:
        return sum(len(group_loop.tasks) for group_loop in self.group_loops.values())

    def failures(self) -> int:
        """Exceptions that escaped a job, a delivery or an idle read on any thread lane (each one logged)."""
        return sum(lane.failures for lane in list(self.threads.values()))

    def cancel(self, record: CallRecord) -> str:
        """Cancel an accepted call (its caller asked, :meth:`PendingCall.cancel`): a queued one never runs, a
        running async one gets CancelledError in its coroutine; a running sync one cannot be stopped. Returns
        what was done."""
        record.cancelled = True  # seen by the call's runner before the method starts (runtime.actor.call_runner)
        task = record.task
        if task is None:
            return "cancelled before it started"
        group_loop = next((g for g in self.group_loops.values() if g.loop is task.get_loop()), None)
        if group_loop is not None:
            group_loop.cancel(task)
        else:  # an async control-plane call: a task on the server's loop, where this built-in runs too
            task.cancel()
        return "cancelled while running"

    def discard_queued(self) -> None:
        """Drop every call not yet started (the process is leaving and answers them itself)."""
        for lane in list(self.threads.values()):
            lane.discard_queued()

    def cancel_async(self) -> None:
        """Cancel every running coroutine (their calls are answered: what they return is not sent)."""
        for group_loop in self.group_loops.values():
            group_loop.cancel_all()

    def stop(self) -> None:
        """Let every lane thread and group loop end once what is queued on it has run."""
        for lane in self.threads.values():
            lane.stop()
        for group_loop in self.group_loops.values():
            group_loop.stop()
