"""Ray's own tests/test_cancel.py (ray-project/ray python/ray/tests at c7c4924f, Apache-2.0), ported: the test
bodies keep Ray's calls; the fixture is one ray.init(num_cpus=4) for the module (ray_start_regular_shared).

Ported: test_cancel_chain, test_cancel_during_arg_deser, test_cancel_multiple_dependents, test_single_cpu_cancel,
test_comprehensive, test_stress, test_fast, test_recursive_cancel, each with and without ``force`` as Ray runs them.
Where Ray starts a 1-CPU cluster (test_single_cpu_cancel, test_stress), each task asks for the module session's
4 CPUs instead (``.options(num_cpus=4)``): one runs at a time, as on one CPU. test_fast sends 500 waiting tasks,
not 5000 (the same cases, in less time), and without Ray's 0.1 s sleep before each cancel (a cancel arriving as
the task starts is no race here: the call is cancelled where it is). ray.cancel's documented semantics this file
does not cover (the task sees KeyboardInterrupt, its worker goes on; actor calls) are in test_ray_compat_cancel.py.

Not ported, and why: test_remote_cancel (cancelling a ref made in another process: here such a ref is a value
kept by that process, and the cancel is not forwarded to it); test_defer_sigint* and
test_cancel_during_arg_deser_non_reentrant_import (Ray's ``DeferSigint`` and serializer registry: Ray interrupts the
worker's main thread with SIGINT, which can land in a non-reentrant import; here the KeyboardInterrupt is raised
only in the task's own thread while it runs, never while its arguments are decoded).
"""

from __future__ import annotations

import random
import time

import pytest
from ray_own_actors import SignalActor as Signal

import runtime.ray_compat as ray
from runtime.ray_compat.exceptions import (
    GetTimeoutError,
    ObjectLostError,
    RayTaskError,
    TaskCancelledError,
    WorkerCrashedError,
)

pytestmark = [pytest.mark.usefixtures("ray_start_regular_shared"), pytest.mark.processes]

SignalActor = ray.remote(num_cpus=0)(Signal)
ONE_CPU = {"num_cpus": 4}  # the module session has 4: a task asking for all of them runs alone, as on 1 CPU


def valid_exceptions(use_force):
    if use_force:
        return (RayTaskError, TaskCancelledError, WorkerCrashedError, ObjectLostError)
    return (RayTaskError, TaskCancelledError)


@pytest.mark.parametrize("use_force", [True, False])
def test_cancel_chain(use_force: bool) -> None:
    """test_cancel.py::test_cancel_chain."""
    signaler = SignalActor.remote()

    @ray.remote
    def wait_for(t):
        return ray.get(t[0])

    obj1 = wait_for.remote([signaler.wait.remote()])
    obj2 = wait_for.remote([obj1])
    obj3 = wait_for.remote([obj2])
    obj4 = wait_for.remote([obj3])

    assert len(ray.wait([obj1], timeout=0.1)[0]) == 0
    ray.cancel(obj1, force=use_force)
    for ob in [obj1, obj2, obj3, obj4]:
        with pytest.raises(valid_exceptions(use_force)):
            ray.get(ob)

    signaler2 = SignalActor.remote()
    obj1 = wait_for.remote([signaler2.wait.remote()])
    obj2 = wait_for.remote([obj1])
    obj3 = wait_for.remote([obj2])
    obj4 = wait_for.remote([obj3])

    assert len(ray.wait([obj3], timeout=0.1)[0]) == 0
    ray.cancel(obj3, force=use_force)
    for ob in [obj3, obj4]:
        with pytest.raises(valid_exceptions(use_force)):
            ray.get(ob)

    with pytest.raises(GetTimeoutError):
        ray.get(obj1, timeout=0.1)

    with pytest.raises(GetTimeoutError):
        ray.get(obj2, timeout=0.1)

    signaler2.send.remote()
    ray.get(obj1)


@pytest.mark.parametrize("use_force", [True, False])
def test_cancel_during_arg_deser(use_force: bool) -> None:
    """test_cancel.py::test_cancel_during_arg_deser (1 s to decode, not 5)."""
    time_to_sleep = 1

    class SlowToDeserialize:
        def __reduce__(self):
            def reconstruct():
                import time

                time.sleep(time_to_sleep)
                return SlowToDeserialize()

            return reconstruct, ()

    @ray.remote
    def dummy(a: SlowToDeserialize):
        raise AssertionError("Task should never execute.")

    arg = SlowToDeserialize()
    obj = dummy.remote(arg)
    # Check that task isn't done.
    assert len(ray.wait([obj], timeout=0.1)[0]) == 0
    # Cancel task.
    ray.cancel(obj, force=use_force)
    with pytest.raises(valid_exceptions(use_force)):
        ray.get(obj)


@pytest.mark.parametrize("use_force", [True, False])
def test_cancel_multiple_dependents(use_force: bool) -> None:
    """test_cancel.py::test_cancel_multiple_dependents."""
    signaler = SignalActor.remote()

    @ray.remote
    def wait_for(t):
        return ray.get(t[0])

    head = wait_for.remote([signaler.wait.remote()])
    deps = []
    for _ in range(3):
        deps.append(wait_for.remote([head]))

    assert len(ray.wait([head], timeout=0.1)[0]) == 0
    ray.cancel(head, force=use_force)
    for d in deps:
        with pytest.raises(valid_exceptions(use_force)):
            ray.get(d)

    head2 = wait_for.remote([signaler.wait.remote()])

    deps2 = []
    for _ in range(3):
        deps2.append(wait_for.remote([head]))

    for d in deps2:
        ray.cancel(d, force=use_force)

    for d in deps2:
        with pytest.raises(valid_exceptions(use_force)):
            ray.get(d)

    signaler.send.remote()
    ray.get(head2)


@pytest.mark.parametrize("use_force", [True, False])
def test_single_cpu_cancel(use_force: bool) -> None:
    """test_cancel.py::test_single_cpu_cancel (one task at a time: each asks for every CPU)."""
    signaler = SignalActor.remote()

    @ray.remote(**ONE_CPU)
    def wait_for(t):
        return ray.get(t[0])

    obj1 = wait_for.remote([signaler.wait.remote()])
    obj2 = wait_for.remote([obj1])
    obj3 = wait_for.remote([obj2])
    indep = wait_for.remote([signaler.wait.remote()])

    assert len(ray.wait([obj3], timeout=0.1)[0]) == 0
    ray.cancel(obj3, force=use_force)
    with pytest.raises(valid_exceptions(use_force)):
        ray.get(obj3)

    ray.cancel(obj1, force=use_force)

    for d in [obj1, obj2]:
        with pytest.raises(valid_exceptions(use_force)):
            ray.get(d)

    signaler.send.remote()
    ray.get(indep)


@pytest.mark.parametrize("use_force", [True, False])
def test_comprehensive(use_force: bool) -> None:
    """test_cancel.py::test_comprehensive."""
    signaler = SignalActor.remote()

    @ray.remote
    def wait_for(t):
        ray.get(t[0])
        return "Result"

    @ray.remote
    def combine(a, b):
        return str(a) + str(b)

    a = wait_for.remote([signaler.wait.remote()])
    b = wait_for.remote([signaler.wait.remote()])
    combo = combine.remote(a, b)
    a2 = wait_for.remote([a])

    assert len(ray.wait([a, b, a2, combo], timeout=1)[0]) == 0

    ray.cancel(a, force=use_force)
    with pytest.raises(valid_exceptions(use_force)):
        ray.get(a, timeout=10)

    with pytest.raises(valid_exceptions(use_force)):
        ray.get(a2, timeout=40)

    signaler.send.remote()

    with pytest.raises(valid_exceptions(use_force)):
        ray.get(combo)


@pytest.mark.parametrize("use_force", [True])
def test_stress(use_force: bool) -> None:
    """test_cancel.py::test_stress (force only, as Ray runs it; one task at a time, as on Ray's 1 CPU)."""

    @ray.remote(**ONE_CPU)
    def infinite_sleep(y):
        if y:
            while True:
                time.sleep(1 / 10)

    first = infinite_sleep.remote(True)

    sleep_or_no = [random.randint(0, 1) for _ in range(100)]
    tasks = [infinite_sleep.remote(i) for i in sleep_or_no]
    cancelled = set()

    # Randomly kill queued tasks (infinitely sleeping or not).
    for t in tasks:
        if random.random() > 0.5:
            ray.cancel(t, force=use_force)
            cancelled.add(t)

    ray.cancel(first, force=use_force)
    cancelled.add(first)

    for done in cancelled:
        with pytest.raises(valid_exceptions(use_force)):
            ray.get(done, timeout=120)

    # Kill all infinitely sleeping tasks (queued or not).
    for indx, t in enumerate(tasks):
        if sleep_or_no[indx]:
            ray.cancel(t, force=use_force)
            cancelled.add(t)
    for t in tasks:
        if t in cancelled:
            with pytest.raises(valid_exceptions(use_force)):
                ray.get(t, timeout=120)
        else:
            ray.get(t, timeout=120)


@pytest.mark.parametrize("use_force", [True, False])
def test_fast(use_force: bool) -> None:
    """test_cancel.py::test_fast (500 waiting tasks, not 5000)."""

    @ray.remote
    def fast(y):
        return y

    signaler = SignalActor.remote()
    ids = list()
    for _ in range(100):
        x = fast.remote("a")
        ray.cancel(x, force=use_force)
        ids.append(x)

    @ray.remote
    def wait_for(y):
        return y

    sig = signaler.wait.remote()
    for _ in range(500):
        x = wait_for.remote(sig)
        ids.append(x)

    for idx in range(100, 600):
        if random.random() > 0.95:
            ray.cancel(ids[idx], force=use_force)
    signaler.send.remote()
    for i, obj_ref in enumerate(ids):
        try:
            ray.get(obj_ref, timeout=120)
        except Exception as e:
            assert isinstance(e, valid_exceptions(use_force)), f"Failure on iteration: {i}"


@pytest.mark.parametrize("use_force", [True, False])
def test_recursive_cancel(use_force: bool) -> None:
    """test_cancel.py::test_recursive_cancel (its cancel is without force in both, as Ray's)."""

    @ray.remote(num_cpus=1)
    def inner():
        while True:
            time.sleep(0.1)

    @ray.remote(num_cpus=1)
    def outer():
        x = [inner.remote()]
        print(x)
        while True:
            time.sleep(0.1)

    @ray.remote(num_cpus=4)
    def many_resources():
        return 300

    outer_fut = outer.remote()
    many_fut = many_resources.remote()
    with pytest.raises(GetTimeoutError):
        ray.get(many_fut, timeout=1)
    ray.cancel(outer_fut)
    with pytest.raises(valid_exceptions(use_force)):
        ray.get(outer_fut, timeout=10)

    assert ray.get(many_fut, timeout=30)
