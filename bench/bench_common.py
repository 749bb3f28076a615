"""Measuring helpers shared by the benchmarks."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def percentile(samples: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q))


def pipelined(method: Callable[[int], Any], calls: int, window: int, timeout_s: float = 60.0) -> float:
    """Calls/s of ``calls`` calls with at most ``window`` in flight (each a PendingCall-like ``.result()``)."""
    pending: collections.deque[Any] = collections.deque()
    started = time.perf_counter()
    for i in range(calls):
        if len(pending) >= window:
            pending.popleft().result(timeout=timeout_s)
        pending.append(method(i))
    while pending:
        pending.popleft().result(timeout=timeout_s)
    return calls / (time.perf_counter() - started)
