"""Actor classes for the fault-injection tests (imported by dotted path in the actor processes)."""

from __future__ import annotations

import collections
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from runtime import metrics


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

    def pid(self) -> int:
        return os.getpid()

    def whoami(self) -> str:
        return self.tag

    def sleep(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    def exit_now(self, code: int) -> None:
        os._exit(code)
