"""Actor classes for the benchmarks (importable by dotted path in actor processes)."""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

import numpy as np


class Echo:
    def __init__(self) -> None:
        self.count = 0

    def noop(self, x: int) -> int:
        self.count += 1
        return x

    async def async_noop(self, x: int) -> int:
        await asyncio.sleep(0)
        return x

    def nbytes(self, data: np.ndarray) -> int:
        return int(data.nbytes)

    def make(self, size: int) -> np.ndarray:
        return np.zeros(size, dtype=np.uint8)


class Driver:
    """Calls other actors from its own process: used for the N:N benchmark."""

    def __init__(self) -> None:
        pass

    def drive(self, targets: list[Any], calls: int, window: int) -> float:
        """Pipelined calls spread over ``targets``; returns elapsed seconds."""
        pending: collections.deque[Any] = collections.deque()
        started = time.perf_counter()
        for i in range(calls):
            if len(pending) >= window:
                pending.popleft().result(timeout=60)
            pending.append(targets[i % len(targets)].noop(i))
        while pending:
            pending.popleft().result(timeout=60)
        return time.perf_counter() - started
