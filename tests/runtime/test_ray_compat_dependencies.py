"""Ray parity: ``.remote()`` with a pending ObjectRef argument returns at once; the call goes once its arguments
are there, and calls to an actor keep the order they were made in.

Ray sources read: docs.ray.io ray-core/tasks.html ("Passing object refs to Ray tasks": a top-level ref is resolved
before the task runs, and the task is scheduled once its dependencies are ready), ray-core/actors/task-orders.html
(tasks of one submitter to a synchronous actor run in submission order, even when an earlier one waits for a
dependency), python/ray/_private/worker.py (``cancel``: a task that has not run is never run). A dependency's error
is raised by the dependent call (python/ray/exceptions.py, RayTaskError). Real processes throughout; a gate is a
file the test creates once ``.remote()`` has returned (so a ``.remote()`` that waited would fail the gate's wait).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import runtime.ray_compat as ray

pytestmark = [pytest.mark.usefixtures("ray_session_2cpu"), pytest.mark.processes]


@ray.remote
def gated(path: str, value: object) -> object:
    """``value`` once the file ``path`` exists (within 30 s)."""
    deadline = time.monotonic() + 30
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the gate {path} was never opened")
        time.sleep(0.01)
    return value


@ray.remote
def square(x: int) -> int:
    return x * x


@ray.remote
def fail() -> None:
    raise ValueError("upstream failed")


@ray.remote
class Log:
    def __init__(self) -> None:
        self.seen: list[object] = []

    def add(self, item: object) -> list[object]:
        self.seen.append(item)
        return list(self.seen)

    def get(self) -> list[object]:
        return list(self.seen)


def test_a_chain_of_tasks_returns_at_once_and_runs_when_its_input_is_there(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    last = square.remote(square.remote(gated.remote(str(gate), 3)))  # returns before the gate opens
    ready, pending = ray.wait([last], timeout=0.3)
    assert (ready, pending) == ([], [last])
    gate.touch()
    assert ray.get(last, timeout=30) == 81


def test_calls_to_an_actor_keep_their_order_behind_one_that_waits_for_its_argument(tmp_path: Path) -> None:
    gate, log = tmp_path / "gate", Log.remote()
    first = log.add.remote(gated.remote(str(gate), "first"))
    second = log.add.remote("second")  # no pending argument, but made after `first`: sent after it
    assert ray.wait([first, second], num_returns=2, timeout=0.3)[0] == []
    gate.touch()
    assert ray.get([first, second], timeout=30) == [["first"], ["first", "second"]]


def test_a_failed_argument_fails_the_call_which_is_never_sent() -> None:
    log = Log.remote()
    dependent = log.add.remote(fail.remote())
    with pytest.raises(ValueError, match="upstream failed"):
        ray.get(dependent, timeout=30)
    assert ray.get(log.add.remote("after"), timeout=30) == ["after"]  # the failed call never reached the actor


def test_a_call_cancelled_while_it_waits_for_its_argument_never_runs(tmp_path: Path) -> None:
    gate, log = tmp_path / "gate", Log.remote()
    upstream = gated.remote(str(gate), "x")
    dependent = log.add.remote(upstream)
    assert ray.cancel(dependent) is None
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(dependent, timeout=30)
    gate.touch()
    assert ray.get(upstream, timeout=30) == "x"
    assert ray.get(log.get.remote(), timeout=30) == []
