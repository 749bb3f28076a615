"""Actor classes for the fault-injection tests (imported by dotted path in the actor processes)."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from runtime import exit_actor, method, metrics


class Tally:
    """Counts how often each key ran: a key that ran twice is a double execution. Exports user metrics."""

    def __init__(self) -> None:
        self.runs: collections.Counter[int] = collections.Counter()
        self.hits = metrics.counter("tally_hits_total", "Calls of Tally.hit", labels=["parity"])
        self.last_key = metrics.gauge("tally_last_key", "The key of the last hit")
        self.key_sizes = metrics.histogram("tally_key_size", "Keys seen by hit", buckets=[10, 100, 1000])

    def hit(self, key: int) -> int:
        self.runs[key] += 1
        self.hits.labels(parity="even" if key % 2 == 0 else "odd").inc()
        self.last_key.set(key)
        self.key_sizes.observe(key)
        return key

    def noop(self, key: int) -> int:
        return key

    def counts(self) -> dict[int, int]:
        return dict(self.runs)

    def size(self, data: np.ndarray) -> int:
        return int(data.nbytes)

    def sleep(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    def relay(self, other: Any, key: int) -> int:
        """Call ``other.hit(key)`` from this actor's process (with this process's keys)."""
        return other.hit(key).result(timeout=10)


class Restartable:
    """Records every construction (pid and kwargs) in ``log_path``; ``fail_after`` constructions, refuses."""

    def __init__(self, *, log_path: str, tag: str, fail_after: int | None = None) -> None:
        path = Path(log_path)
        done = len(path.read_text().splitlines()) if path.exists() else 0
        if fail_after is not None and done >= fail_after:
            raise RuntimeError(f"construction {done + 1} refused (fail_after={fail_after})")
        with path.open("a") as handle:
            handle.write(json.dumps({"pid": os.getpid(), "tag": tag}) + "\n")
        self.tag = tag
        self.total = 0

    def add(self, n: int) -> int:
        self.total += n
        return self.total

    def get_pid(self) -> int:
        return os.getpid()

    def whoami(self) -> str:
        return self.tag

    def sleep(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    def exit_now(self, code: int) -> None:
        os._exit(code)


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot describe itself")


class _OddExit(BaseException):
    """A BaseException that is neither SystemExit nor KeyboardInterrupt."""


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


class Leaver:
    """Leaves its process in every way a method can (tests/faults/test_never_hang.py), and returns what cannot be
    sent. ``log_path`` records each construction, so a restart is seen."""

    concurrency_groups = {"io": 2}

    def __init__(self, *, log_path: str = "") -> None:
        if log_path:
            with Path(log_path).open("a") as handle:
                handle.write(json.dumps({"pid": os.getpid()}) + "\n")

    def add(self, n: int) -> int:
        return n + 1

    def get_pid(self) -> int:
        return os.getpid()

    def sleep(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    @method(concurrency_group="io")
    def sleep_io(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    async def sleep_async(self, seconds: float) -> float:
        await asyncio.sleep(seconds)
        return seconds

    @method(control_plane=True)
    def ping(self) -> str:
        return "pong"

    def exit_with(self, code: int) -> None:
        sys.exit(code)

    def interrupt(self) -> None:
        raise KeyboardInterrupt

    def odd_exit(self) -> None:
        raise _OddExit("neither SystemExit nor KeyboardInterrupt")

    def quit(self) -> None:
        exit_actor()

    async def quit_async(self) -> None:
        await asyncio.sleep(0)
        exit_actor()

    async def raise_cancelled(self) -> None:
        raise asyncio.CancelledError("given up")

    async def cancelled_by_itself(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(10)

    def unsendable(self, kind: str) -> Any:
        values = {
            "int65": 2**70,
            "nested": _nested(1000),
            # A datetime64 array or a bare object() travel as sealed pickles now (transport.sealed_pickle): these
            # cannot be pickled at all.
            "lock": threading.Lock(),
            "generator": (n for n in range(3)),
        }
        return values[kind]

    def unprintable(self) -> None:
        raise _Unprintable()


class Keeper:
    """Keeps a handle it was given (as a holder on another host would) and calls through it; reports each outcome
    as data, so the test sees the exception this process got."""

    def __init__(self) -> None:
        self.other: Any = None

    def keep(self, other: Any) -> str | None:
        self.other = other
        return other.boot_id

    async def add(self, n: int) -> dict[str, Any]:
        try:
            return {"value": await self.other.add(n), "error": None, "pinned": self.other.boot_id}
        except Exception as exc:
            return {"value": None, "error": f"{type(exc).__name__}: {exc}", "pinned": self.other.boot_id}

    def seen_boot(self) -> str | None:
        """The incarnation this process's connection to the actor last heard from."""
        return self.other.connection.boot_id

    async def follow(self) -> str | None:
        await self.other.follow_restart_async(deadline_s=20.0)
        return self.other.boot_id
