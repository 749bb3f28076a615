"""Actor classes for the death-detection tests (imported by dotted path in the actor processes)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from runtime import ActorDied, ActorHandle, ObjectRef, put, spawn


class Sleeper:
    """The actor that dies: sleeps on its default lane, holds values for object refs."""

    def __init__(self) -> None:
        self.started = time.time()

    def sleep(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    def get_pid(self) -> int:
        return os.getpid()

    def make_ref(self, size: int) -> ObjectRef:
        return put(list(range(size)))


class Spawner:
    """Spawns children and hands out their handles: whoever gets one is not the spawner."""

    def __init__(self) -> None:
        self.children: list[ActorHandle] = []

    def spawn_child(self, name: str) -> ActorHandle:
        child = spawn("death_actors:Sleeper", name=name)  # registered under ``name`` (MILES_ACTOR_REGISTRY)
        self.children.append(child)
        return child

    def get_pid(self) -> int:
        return os.getpid()


def _outcome(error: BaseException | None, value: Any = None) -> dict[str, Any]:
    return {
        "at": time.time(),
        "error": f"{type(error).__name__}: {error}" if error is not None else None,
        "died": isinstance(error, ActorDied),
        "value": value,
    }


class Holder:
    """Holds handles and refs to other actors and reports when (wall clock) their calls ended, and how."""

    async def warm(self, other: Any) -> float:
        """One call, so the connection is open before the test kills ``other``."""
        return await other.sleep(0.0)

    async def sleep_on(self, other: Any, seconds: float) -> dict[str, Any]:
        try:
            return _outcome(None, await other.sleep(seconds))
        except Exception as exc:
            return _outcome(exc)

    async def call_now(self, other: Any) -> dict[str, Any]:
        try:
            return _outcome(None, await other.sleep(0.0))
        except Exception as exc:
            return _outcome(exc)

    async def get_ref(self, ref: Any) -> dict[str, Any]:
        try:
            return _outcome(None, len(await ref.get_async()))
        except Exception as exc:
            return _outcome(exc)

    async def health_while_busy(self, other: Any, seconds: float) -> dict[str, Any]:
        """Call ``other.sleep(seconds)`` and ask for its health every 0.2 s meanwhile."""
        import asyncio

        busy = asyncio.ensure_future(asyncio.wrap_future(other.sleep(seconds).future))
        answers, worst = 0, 0.0
        while not busy.done():
            started = time.monotonic()
            health = await other.method("__health__").options(deadline_s=2.0)()
            worst = max(worst, time.monotonic() - started)
            answers += 1 if health["constructed"] else 0
            await asyncio.sleep(0.2)
        return {"slept": await busy, "answers": answers, "worst_s": worst, "dead": other.dead}


class DiesInConstructor:
    """Prints a line, then leaves inside its constructor: ``how`` is exit (os._exit), system_exit or signal."""

    def __init__(self, *, how: str) -> None:
        print(f"constructor of DiesInConstructor leaves by {how} now", flush=True)
        if how == "exit":
            os._exit(3)
        if how == "system_exit":
            raise SystemExit(4)
        if how == "signal":
            os.kill(os.getpid(), signal.SIGKILL)
        raise ValueError(f"unknown way to leave: {how!r}")
