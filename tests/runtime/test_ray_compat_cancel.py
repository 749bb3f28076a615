"""``ray.cancel`` as Ray documents it (docs.ray.io/en/latest/ray-core/api/doc/ray.cancel.html), beyond what Ray's
own test_cancel.py checks (test_ray_own_cancel.py): a running task sees KeyboardInterrupt and its worker goes on;
``force=True`` ends the worker; actor calls (``force`` refused, queued ones never run, a running sync one runs on).
"""

from __future__ import annotations

import time

import pytest
from ray_own_actors import SignalActor as Signal

import runtime.ray_compat as ray
from runtime.ray_compat.exceptions import TaskCancelledError

pytestmark = [pytest.mark.usefixtures("ray_start_regular_shared"), pytest.mark.processes]

SignalActor = ray.remote(num_cpus=0)(Signal)
ONE_CPU = {"num_cpus": 4}  # the module session has 4: a task asking for all of them runs alone


@ray.remote(num_cpus=0)
class Log:
    def __init__(self):
        self.lines = []

    def add(self, line):
        self.lines.append(line)

    def read(self):
        return list(self.lines)


def _until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_running_task_sees_keyboard_interrupt_and_its_worker_goes_on() -> None:
    """force=False: "a KeyboardInterrupt is raised in Python", in a task running Python code and in one blocked in
    ray.get; its worker then runs the next task."""

    @ray.remote(**ONE_CPU)
    def loop(log, busy, waits):
        import os

        log.add.remote(("started", os.getpid()))
        try:
            if busy:
                while True:
                    pass  # pure Python: interrupted at its next bytecode
            ray.get(waits[0])  # blocked in ray.get: woken by the interrupt
        except KeyboardInterrupt:
            ray.get(log.add.remote(("interrupted", os.getpid())))
            raise

    @ray.remote(**ONE_CPU)
    def pid():
        import os

        return os.getpid()

    signaler = SignalActor.remote()
    for busy in (True, False):
        log = Log.remote()
        ref = loop.remote(log, busy, [signaler.wait.remote()])
        _until(lambda: ray.get(log.read.remote()))  # noqa: B023 - called in this iteration
        ray.cancel(ref)
        with pytest.raises(TaskCancelledError):
            ray.get(ref, timeout=10)
        _until(lambda: len(ray.get(log.read.remote())) == 2)  # noqa: B023
        (started, worker), (interrupted, same_worker) = ray.get(log.read.remote())
        assert (started, interrupted) == ("started", "interrupted")
        assert worker == same_worker == ray.get(pid.remote(), timeout=10)  # the worker lives on


def test_force_ends_the_worker_of_a_running_task() -> None:
    """force=True: "the executing Task immediately exits" (its worker process is gone); the next task runs."""

    @ray.remote(**ONE_CPU)
    def hang(log):
        import os

        log.add.remote(os.getpid())
        while True:
            time.sleep(0.1)

    log = Log.remote()
    ref = hang.remote(log)
    _until(lambda: ray.get(log.read.remote()))
    (worker_pid,) = ray.get(log.read.remote())
    ray.cancel(ref, force=True)
    with pytest.raises(TaskCancelledError):
        ray.get(ref, timeout=10)

    def gone() -> bool:
        try:
            with open(f"/proc/{worker_pid}/stat") as stat:
                return stat.read().split(")")[-1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    _until(gone)

    @ray.remote
    def one():
        return 1

    assert ray.get(one.remote(), timeout=30) == 1


def test_actor_calls() -> None:
    """Actor tasks: force=True raises ValueError; a queued call never runs; a running sync one runs on (its ref
    raises TaskCancelledError); a running async one is cancelled (asyncio)."""

    @ray.remote
    class Slow:
        def __init__(self):
            self.ran = []

        def work(self, tag, seconds):
            time.sleep(seconds)
            self.ran.append(tag)

        def ran_tags(self):
            return list(self.ran)

    actor = Slow.remote()
    unsent = actor.work.remote("unsent", 0)  # sent once the actor is constructed: cancelled before that
    ray.cancel(unsent)
    assert ray.get(actor.ran_tags.remote(), timeout=30) == []
    running = actor.work.remote("running", 0.5)
    queued = actor.work.remote("queued", 0)
    with pytest.raises(ValueError, match=r"force=True is not supported for actor tasks"):
        ray.cancel(running, force=True)
    time.sleep(0.2)
    ray.cancel(running)
    ray.cancel(queued)
    for ref in (unsent, running, queued):
        with pytest.raises(TaskCancelledError):
            ray.get(ref, timeout=10)
    assert ray.get(actor.ran_tags.remote(), timeout=10) == ["running"]


def test_recursive_cancel_interrupts_the_tasks_the_task_made() -> None:
    """recursive=True (the default): "all the child Tasks and Actor Tasks are cancelled"; recursive=False: the
    child runs on."""

    @ray.remote(num_cpus=1)
    def inner(log, tag):
        log.add.remote(("inner started", tag))
        try:
            while True:
                time.sleep(0.05)
        except KeyboardInterrupt:
            ray.get(log.add.remote(("inner interrupted", tag)))
            raise

    @ray.remote(num_cpus=1)
    def outer(log, tag):
        child = inner.remote(log, tag)  # noqa: F841 - held while it runs
        while True:
            time.sleep(0.05)

    log = Log.remote()
    for tag, recursive in (("recursive", True), ("alone", False)):
        ref = outer.remote(log, tag)
        _until(lambda: ("inner started", tag) in ray.get(log.read.remote()), timeout=30)  # noqa: B023
        ray.cancel(ref, recursive=recursive)
        with pytest.raises(TaskCancelledError):
            ray.get(ref, timeout=10)
    _until(lambda: ("inner interrupted", "recursive") in ray.get(log.read.remote()))
    time.sleep(0.5)
    assert ("inner interrupted", "alone") not in ray.get(log.read.remote())


def test_a_task_whose_worker_dies_raises_worker_crashed_error() -> None:
    """ray.exceptions.WorkerCrashedError: "Indicates that the worker died unexpectedly while executing a task" (once
    its retries, max_retries, are used up)."""

    @ray.remote(max_retries=1)
    def die():
        import os

        os._exit(1)

    with pytest.raises(ray.exceptions.WorkerCrashedError, match="The worker died unexpectedly"):
        ray.get(die.remote(), timeout=60)


def test_get_with_timeout_in_a_task_waits_the_timeout_once() -> None:
    """ray.get(ref, timeout=) in a task waits (interruptibly) once: GetTimeoutError after the timeout, for a call's
    ref and for a ref passed in a list (a stored value); the driver's get of such a ref times out alike."""
    from runtime.ray_compat.exceptions import GetTimeoutError

    signaler = SignalActor.remote()

    @ray.remote
    def get_late(refs, own):
        import time

        waited = []
        for ref in (refs[0], own.remote() if own else None):
            if ref is None:
                continue
            started = time.monotonic()
            try:
                ray.get(ref, timeout=0.5)
            except GetTimeoutError:
                waited.append(time.monotonic() - started)
        return waited

    @ray.remote
    def pending():
        import time

        time.sleep(3)

    waited = ray.get(get_late.remote([signaler.wait.remote()], pending), timeout=30)
    assert len(waited) == 2 and all(0.4 < w < 1.4 for w in waited), waited

    @ray.remote
    def hand_out(refs):
        return [refs[0]]

    (kept,) = ray.get(hand_out.remote([signaler.wait.remote()]), timeout=30)
    with pytest.raises(GetTimeoutError):
        ray.get(kept, timeout=0.3)
    signaler.send.remote()
    assert ray.get(kept, timeout=10) is None
