"""A link that drops, delays (reorders) and duplicates messages: every call returns or fails with a clear error,
and none runs twice (the actor counts executions per call argument)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from fault_helpers import LossyLinkProcess

from runtime import ActorError, ActorHandle, DeadlineExceeded, NotDelivered, spawn

pytestmark = pytest.mark.processes

log = logging.getLogger(__name__)

CALLS = 10_000
WINDOW = 500


def _through(link: LossyLinkProcess, actor: ActorHandle) -> ActorHandle:
    """A handle to ``actor`` whose traffic goes through ``link``."""
    return ActorHandle(
        endpoint=link.address,
        name=f"{actor.actor_name}-via-link",
        class_path=actor.class_path,
        boot_id=actor.boot_id,
        host=actor.host,
        pid=actor.pid,
        info=actor.info,
    )


def _run_calls(via: ActorHandle, calls: int, deadline_s: float) -> tuple[set[int], list[ActorError]]:
    """``calls`` calls of ``hit(key)``, at most WINDOW in flight (a stalled call does not hold up the others)."""
    slots = threading.Semaphore(WINDOW)
    pending: list[tuple[int, Any]] = []
    for key in range(calls):
        if not slots.acquire(timeout=deadline_s + 30):
            pytest.fail(f"no call finished within {deadline_s + 30} s")
        call = via.hit.options(deadline_s=deadline_s)(key)
        call.future.add_done_callback(lambda _: slots.release())
        pending.append((key, call))
    returned: set[int] = set()
    errors: list[ActorError] = []
    for key, call in pending:
        try:
            value = call.result(timeout=deadline_s + 30)
        except ActorError as exc:
            errors.append(exc)
            continue
        assert value == key
        returned.add(key)
    return returned, errors


def test_10k_calls_over_a_lossy_link_run_at_most_once(lossy_link: Callable[..., LossyLinkProcess]) -> None:
    actor = spawn("fault_actors:Tally", name="tally")
    try:
        link = lossy_link(actor.endpoint, drop=0.05, dup=0.05, delay=0.2, max_delay=0.05, seed=11)
        started = time.monotonic()
        returned, errors = _run_calls(_through(link, actor), CALLS, deadline_s=60)
        elapsed = time.monotonic() - started
        runs = actor.counts().result(30)
        server = actor.method("__stats__")().result(10)
        link_stats = link.stop()
        log.info("lossy link: %s; %d returned, %d failed in %.1f s", link_stats, len(returned), len(errors), elapsed)
        print(f"\nlossy link {link_stats}: {len(returned)} returned, {len(errors)} failed in {elapsed:.1f} s")

        doubles = {key: count for key, count in runs.items() if count > 1}
        assert not doubles, f"calls ran more than once: {dict(list(doubles.items())[:10])}"
        assert returned <= set(runs), "a call returned without running"
        assert len(returned) + len(errors) == CALLS
        for exc in errors:  # a failure must say what failed and why
            assert isinstance(exc, (DeadlineExceeded, NotDelivered)), repr(exc)
            assert "'tally-via-link'" in str(exc) and "'hit'" in str(exc)
        assert len(errors) <= CALLS // 100, errors[:3]
        assert link_stats["dropped"] > 100 and link_stats["duplicated"] > 100 and link_stats["delayed"] > 100
        assert server["duplicates_total"] > 0  # duplicated SUBMITs reached the actor and were not run again
    finally:
        actor.kill()


def test_a_dead_link_fails_calls_by_their_deadline_and_runs_nothing(
    lossy_link: Callable[..., LossyLinkProcess],
) -> None:
    actor = spawn("fault_actors:Tally", name="tally")
    try:
        link = lossy_link(actor.endpoint, drop=1.0)
        via = _through(link, actor)
        started = time.monotonic()
        calls = [via.hit.options(deadline_s=2.0)(key) for key in range(50)]
        for call in calls:
            with pytest.raises(DeadlineExceeded, match=r"'tally-via-link' method 'hit'.*deadline passed"):
                call.result(timeout=10)
        assert time.monotonic() - started < 6.0
        assert actor.counts().result(10) == {}
        assert link.stop()["dropped"] >= 50
    finally:
        actor.kill()
