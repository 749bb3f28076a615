"""Soak: 60k small calls keep the caller's and the actor's memory bounded (RSS printed before and after)."""

from __future__ import annotations

import gc
import os
import threading
import time

import pytest
from fault_helpers import rss_mb

from runtime import spawn
from runtime.internals import StoreLimits

pytestmark = pytest.mark.processes

CALLS = 60_000
WARMUP = 10_000  # fills the tombstones to their cap (TOMBSTONES): past it, nothing grows by design
TOMBSTONES = 5_000
WINDOW = 1000
# A leak of 250 bytes a call fails it, as 50 MB over 200k calls did (a minute of CI); 200k calls grew the caller
# 0.4 MB and the actor 4.2 MB here (allocator noise, not per call)
MAX_GROWTH_MB = CALLS * 250 / 1e6


def _pipelined(method: object, start: int, calls: int) -> None:
    """``calls`` calls with at most WINDOW in flight."""
    slots = threading.Semaphore(WINDOW)
    last = None
    for key in range(start, start + calls):
        if not slots.acquire(timeout=60):
            pytest.fail("no call finished within 60 s")
        last = method(key)  # type: ignore[operator]
        last.future.add_done_callback(lambda _: slots.release())
    for _ in range(WINDOW):  # all done once every slot is back
        if not slots.acquire(timeout=60):
            pytest.fail("calls still pending 60 s after the last was sent")
    assert last is not None and last.result(timeout=1) == start + calls - 1


def test_60k_calls_keep_memory_bounded(no_leaks: None) -> None:
    # Tombstones (acknowledged call ids, kept so a late duplicate is not run again) are the one thing that grows
    # by design; cap them as a long-running job would be configured to, and sweep often.
    actor = spawn("fault_actors:Tally", limits=StoreLimits(max_tombstones=TOMBSTONES, result_ttl_s=8.0))
    try:
        _pipelined(actor.noop, 0, WARMUP)
        gc.collect()
        caller_before, actor_before = rss_mb(os.getpid()), rss_mb(actor.pid)
        started = time.monotonic()
        _pipelined(actor.noop, WARMUP, CALLS)
        elapsed = time.monotonic() - started
        time.sleep(2.5)  # one expiry sweep (every result_ttl_s / 4) trims the tombstones
        gc.collect()
        caller_after, actor_after = rss_mb(os.getpid()), rss_mb(actor.pid)
        store = actor.method("__stats__")().result(10)["store"]
        print(
            f"\nsoak: {CALLS} calls in {elapsed:.1f} s ({CALLS / elapsed:.0f}/s); RSS caller "
            f"{caller_before:.1f} -> {caller_after:.1f} MiB, actor {actor_before:.1f} -> {actor_after:.1f} MiB; "
            f"store {store}"
        )
        assert caller_after - caller_before < MAX_GROWTH_MB
        assert actor_after - actor_before < MAX_GROWTH_MB
        assert store["calls"] < WINDOW and store["tombstones"] <= TOMBSTONES
    finally:
        actor.kill()
