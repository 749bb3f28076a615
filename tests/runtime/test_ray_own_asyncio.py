"""Ray's own tests/test_asyncio.py (ray-project/ray python/ray/tests at 013fed65, Apache-2.0), ported: the test
bodies keep Ray's calls; only the fixture (one ray.init for the module, as ray_start_regular_shared) and
SignalActor (ray._private.test_utils', re-declared as Ray's) are ours.

Not ported, and why: test_async_callback and test_async_obj_unhandled_errors (``ref._on_completed`` and
``ray.worker._unhandled_error_handler`` are Ray internals); test_asyncio_exit_actor's last step and
test_asyncio_get's kill helper (``ray.state.actors()`` and ``kill_actor_and_wait_for_failure``: Ray's GCS table;
the steps before them are ported); the "promoted to plasma" step of test_asyncio_get runs, with no object store.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import pytest
from ray_own_actors import SignalActor as Signal

import runtime.ray_compat as ray

pytestmark = [pytest.mark.usefixtures("ray_start_regular_shared"), pytest.mark.processes]


SignalActor = ray.remote(num_cpus=0)(Signal)


def test_asyncio_actor() -> None:
    """test_asyncio.py::test_asyncio_actor."""

    @ray.remote
    class AsyncBatcher:
        def __init__(self):
            self.batch = []
            self.event = asyncio.Event()

        async def add(self, x):
            self.batch.append(x)
            if len(self.batch) >= 3:
                self.event.set()
            else:
                await self.event.wait()
            return sorted(self.batch)

    a = AsyncBatcher.remote()
    x1 = a.add.remote(1)
    x2 = a.add.remote(2)
    x3 = a.add.remote(3)
    r1 = ray.get(x1)
    r2 = ray.get(x2)
    r3 = ray.get(x3)
    assert r1 == [1, 2, 3]
    assert r1 == r2 == r3


def test_asyncio_actor_same_thread() -> None:
    """test_asyncio.py::test_asyncio_actor_same_thread: an async actor's sync methods run on its loop's thread."""

    @ray.remote
    class Actor:
        def sync_thread_id(self):
            return threading.current_thread().ident

        async def async_thread_id(self):
            return threading.current_thread().ident

    a = Actor.remote()
    sync_id, async_id = ray.get([a.sync_thread_id.remote(), a.async_thread_id.remote()])
    assert sync_id == async_id


def test_asyncio_actor_concurrency() -> None:
    """test_asyncio.py::test_asyncio_actor_concurrency."""

    @ray.remote
    class RecordOrder:
        def __init__(self):
            self.history = []

        async def do_work(self):
            self.history.append("STARTED")
            # Force a context switch
            await asyncio.sleep(0)
            self.history.append("ENDED")

        def get_history(self):
            return self.history

    num_calls = 10

    a = RecordOrder.options(max_concurrency=1).remote()
    ray.get([a.do_work.remote() for _ in range(num_calls)])
    history = ray.get(a.get_history.remote())

    # We only care about ordered start-end-start-end sequence because
    # coroutines may be executed out of enqueued order.
    answer = []
    for _ in range(num_calls):
        for status in ["STARTED", "ENDED"]:
            answer.append(status)

    assert history == answer


def test_asyncio_actor_high_concurrency() -> None:
    """test_asyncio.py::test_asyncio_actor_high_concurrency (concurrency above the recursion limit)."""

    @ray.remote
    class AsyncConcurrencyBatcher:
        def __init__(self, batch_size):
            self.batch = []
            self.event = asyncio.Event()
            self.batch_size = batch_size

        async def add(self, x):
            self.batch.append(x)
            if len(self.batch) >= self.batch_size:
                self.event.set()
            else:
                await self.event.wait()
            return sorted(self.batch)

    batch_size = sys.getrecursionlimit() * 4
    actor = AsyncConcurrencyBatcher.options(max_concurrency=batch_size * 2).remote(batch_size)
    result = ray.get([actor.add.remote(i) for i in range(batch_size)])
    assert result[0] == list(range(batch_size))
    assert result[-1] == list(range(batch_size))


def test_asyncio_get() -> None:
    """test_asyncio.py::test_asyncio_get (``ref.as_future()`` of tasks and actor calls), up to its kill helper."""

    async def body():
        # Test Async Plasma
        @ray.remote
        def task():
            return 1

        assert await task.remote().as_future() == 1

        @ray.remote
        def task_throws():
            1 / 0  # noqa: B018 - as Ray's test

        with pytest.raises(ray.exceptions.RayTaskError):
            await task_throws.remote().as_future()

        # Test actor calls.
        str_len = 200 * 1024

        @ray.remote
        class Actor:
            def echo(self, i):
                return i

            def big_object(self):
                # 100Kb is the limit for direct call
                return "a" * (str_len)

            def throw_error(self):
                1 / 0  # noqa: B018 - as Ray's test

        actor = Actor.remote()

        actor_call_future = actor.echo.remote(2).as_future()
        assert await actor_call_future == 2

        promoted_to_plasma_future = actor.big_object.remote().as_future()
        assert await promoted_to_plasma_future == "a" * str_len

        with pytest.raises(ray.exceptions.RayTaskError):
            await actor.throw_error.remote().as_future()

        ray.kill(actor)  # ours, for Ray's kill_actor_and_wait_for_failure
        with pytest.raises(ray.exceptions.RayActorError):
            await actor.echo.remote(1)

    asyncio.run(body())


def test_asyncio_actor_async_get() -> None:
    """test_asyncio.py::test_asyncio_actor_async_get: an actor awaits a task's ref and a put ref it was handed."""

    @ray.remote
    def remote_task():
        return 1

    @ray.remote
    class AsyncGetter:
        async def get(self):
            return await remote_task.remote()

        async def plasma_get(self, plasma_object):
            return await plasma_object[0]

    plasma_object = ray.put(2)
    getter = AsyncGetter.remote()
    assert ray.get(getter.get.remote()) == 1
    assert ray.get(getter.plasma_get.remote([plasma_object])) == 2


def test_asyncio_double_await() -> None:
    """test_asyncio.py::test_asyncio_double_await (Ray issue 8841)."""

    async def body():
        signal = SignalActor.remote()
        waiting = signal.wait.remote()

        future = waiting.as_future()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(future, timeout=0.1)  # noqa: TID251 (Ray's own test: wait_for cancels the future)
        assert future.cancelled()

        # We are explicitly waiting multiple times here to test asyncio state
        # override.
        await signal.send.remote()
        await waiting
        await waiting

    asyncio.run(body())


def test_asyncio_exit_actor() -> None:
    """test_asyncio.py::test_asyncio_exit_actor (Ray issue 12649), but its check of Ray's actor table."""

    @ray.remote
    class Actor:
        async def exit(self):
            ray.actor.exit_actor()

        async def ping(self):
            return "pong"

        async def loop_forever(self):
            while True:
                await asyncio.sleep(5)

    a = Actor.options(max_task_retries=0).remote()
    a.loop_forever.remote()
    # Make sure exit_actor exits immediately, not once all tasks completed.
    with pytest.raises(ray.exceptions.RayError):
        ray.get(a.exit.remote())

    # New calls should just error.
    with pytest.raises(ray.exceptions.RayError):
        ray.get(a.ping.remote())


def test_async_function_errored() -> None:
    """test_asyncio.py::test_async_function_errored: an ``async def`` task is a ValueError, as Ray's."""
    with pytest.raises(ValueError):

        @ray.remote
        async def f():
            pass


def test_asyncio_actor_with_large_concurrency() -> None:
    """test_asyncio.py::test_asyncio_actor_with_large_concurrency (no thread per allowed coroutine)."""

    @ray.remote
    class Actor:
        def sync_thread_id(self):
            time.sleep(2)
            return threading.current_thread().ident

        async def async_thread_id(self):
            time.sleep(2)
            return threading.current_thread().ident

    a = Actor.options(max_concurrency=100000).remote()
    sync_id, async_id = ray.get([a.sync_thread_id.remote(), a.async_thread_id.remote()])
    assert sync_id == async_id
