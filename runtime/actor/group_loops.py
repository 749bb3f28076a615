"""Event loops of concurrency groups: each group's async methods run on a loop and thread of their own, so a coroutine
that blocks stalls only its own group, not another, nor the actor's main loop (socket, control lane), as in Ray."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from runtime.core.event_loop import new_event_loop
from runtime.core.loop_work import LoopWork

_START_DEADLINE_S = 10.0


class GroupLoop:
    """One concurrency group's event loop, running on its own daemon thread."""

    def __init__(self, group: str, actor: str) -> None:
        self.group = group
        self.loop = new_event_loop()
        self.tasks: set[asyncio.Task[Any]] = set()  # touched on the loop's thread only
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name=f"group-loop-{group}", daemon=True)
        self._thread.start()
        if not started.wait(_START_DEADLINE_S):
            raise RuntimeError(f"actor {actor!r}: the event loop of concurrency group {group!r} did not start")
        self._work = LoopWork(self.loop, self._thread.ident or 0, name=f"{actor} group {group}")

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(started.set)
        self.loop.run_forever()

    def start(self, make: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run the coroutine ``make()`` as a task on this loop (from any thread)."""
        self._work.run_soon(lambda: self._start(make()))

    def _start(self, coro: Coroutine[Any, Any, None]) -> None:
        task = self.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def cancel(self, task: asyncio.Task[Any]) -> None:
        """Cancel ``task`` (one of this loop's) from any thread."""
        self.loop.call_soon_threadsafe(task.cancel)

    def cancel_all(self) -> None:
        """Cancel every task (the process is leaving and has answered their calls); from any thread."""

        def cancel() -> None:
            for task in list(self.tasks):
                task.cancel()

        self.loop.call_soon_threadsafe(cancel)

    def stop(self) -> None:
        """Stop the loop once what is scheduled has run (its thread then ends)."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.loop.stop)
