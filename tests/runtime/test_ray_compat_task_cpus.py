"""Ray parity: a task holds its ``num_cpus`` while it runs, so ``num_cpus`` limits how many run at once.

Ray sources read: docs.ray.io ray-core/patterns/limit-running-tasks.html (a heavier ``num_cpus`` to run fewer tasks
at once), ray-core/scheduling/resources.html (a task is scheduled once its resources are free and holds them while
it runs), python/ray/_private/worker.py (``cancel``: a task that has not run is never run). A session of 2 CPUs;
each task reports when it ran (``time.perf_counter``: CLOCK_MONOTONIC, the same clock in every process).
"""

from __future__ import annotations

import concurrent.futures
import time

import pytest

import runtime.ray_compat as ray
from runtime.ray_compat import state

pytestmark = [pytest.mark.usefixtures("ray_session_2cpu"), pytest.mark.processes]


@ray.remote(num_cpus=2)
def heavy(seconds: float) -> tuple[float, float]:
    started = time.perf_counter()
    time.sleep(seconds)
    return started, time.perf_counter()


@ray.remote
def light(seconds: float) -> tuple[float, float]:
    started = time.perf_counter()
    time.sleep(seconds)
    return started, time.perf_counter()


@ray.remote(num_cpus=2)
def boom() -> None:
    raise ValueError("boom")


def overlapping(spans: list[tuple[float, float]]) -> int:
    """The most spans running at one moment."""
    return max(sum(1 for start, end in spans if start <= moment < end) for moment, _ in spans)


def assert_all_cpus_free() -> None:
    slots = state.current().slots
    deadline = time.monotonic() + 5
    while slots.free != slots.total and time.monotonic() < deadline:  # given back as the results settle
        time.sleep(0.01)
    assert slots.free == slots.total == 2


def test_tasks_that_need_every_cpu_run_one_at_a_time() -> None:
    spans = ray.get([heavy.remote(0.3) for _ in range(3)], timeout=60)
    assert overlapping(spans) == 1, spans
    assert_all_cpus_free()


def test_a_task_waits_behind_an_earlier_one_that_holds_the_cpus_it_needs() -> None:
    first = heavy.remote(0.3)
    second = light.remote(0.0)  # one CPU would be free on a pool of two workers, but `first` holds both
    (_, first_end), (second_start, _) = ray.get([first, second], timeout=60)
    assert second_start >= first_end
    spans = ray.get([light.remote(0.3) for _ in range(4)], timeout=60)
    assert overlapping(spans) <= 2, spans
    assert_all_cpus_free()


def test_a_task_cancelled_while_it_waits_for_cpus_never_runs_and_holds_none() -> None:
    running = heavy.remote(0.5)
    waiting = heavy.remote(0.0)
    assert ray.cancel(waiting) is None
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(waiting, timeout=30)
    after = light.remote(0.0)
    (_, running_end), (after_start, _) = ray.get([running, after], timeout=60)
    assert after_start >= running_end
    assert_all_cpus_free()


def test_a_failed_task_gives_its_cpus_back() -> None:
    with pytest.raises(ValueError, match="boom"):
        ray.get(boom.remote(), timeout=30)
    assert_all_cpus_free()
    assert ray.get(heavy.remote(0.0), timeout=30)


def test_shutdown_fails_calls_still_waiting_for_cpus() -> None:
    # the mechanism alone (a session's slots and one call's hold), without ending the module's session
    from runtime.ray_compat.task_slots import CpuHold, TaskSlots

    slots = TaskSlots(2.0)
    first = CpuHold(slots, 2.0)
    assert first.when_granted(((1,), {})) == ((1,), {}) and slots.free == 0
    waiting = CpuHold(slots, 1.0).when_granted(((2,), {}))
    assert not waiting.done()  # type: ignore[union-attr]
    slots.close(RuntimeError("shut down"))
    with pytest.raises(RuntimeError, match="shut down"):
        waiting.result(timeout=5)  # type: ignore[union-attr]
    done: concurrent.futures.Future[None] = concurrent.futures.Future()
    done.set_result(None)
    first.settled(done)
    assert slots.free == 2.0
