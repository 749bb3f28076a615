"""Ray's own tests/test_concurrency_group.py (ray-project/ray python/ray/tests at 048f73e1, Apache-2.0), ported:
the test bodies keep Ray's calls; only the fixture (one ray.init for the module, as ray_start_regular_shared) is ours.
Not ported: test_basic, whose constructor calls asyncio.get_event_loop() and expects the default group's loop:
here the group loops start once the constructor has returned, so there is no loop on the constructor's thread
(its methods' part, sync methods on their group's loop thread, holds:
test_ray_own_asyncio::test_asyncio_actor_same_thread)."""

from __future__ import annotations

import asyncio
import time

import pytest

import runtime.ray_compat as ray

pytestmark = [pytest.mark.usefixtures("ray_start_regular_shared"), pytest.mark.processes]


def test_async_methods_in_concurrency_group() -> None:
    """test_concurrency_group.py::test_async_methods_in_concurrency_group."""

    @ray.remote(concurrency_groups={"async": 3})
    class AsyncBatcher:
        def __init__(self):
            self.batch = []
            self.event = None

        @ray.method(concurrency_group="async")
        def init_event(self):
            self.event = asyncio.Event()
            return True

        @ray.method(concurrency_group="async")
        async def add(self, x):
            self.batch.append(x)
            if len(self.batch) >= 3:
                self.event.set()
            else:
                await self.event.wait()
            return sorted(self.batch)

    a = AsyncBatcher.remote()
    ray.get(a.init_event.remote())

    x1 = a.add.remote(1)
    x2 = a.add.remote(2)
    x3 = a.add.remote(3)
    r1 = ray.get(x1)
    r2 = ray.get(x2)
    r3 = ray.get(x3)
    assert r1 == [1, 2, 3]
    assert r1 == r2 == r3


def test_default_concurrency_group_does_not_block_others() -> None:
    """test_concurrency_group.py::test_default_concurrency_group_does_not_block_others (Ray issue 20475)."""

    @ray.remote(concurrency_groups={"my_group": 1})
    class AsyncActor:
        def __init__(self):
            pass

        async def f1(self):
            time.sleep(10000)
            return "never return"

        @ray.method(concurrency_group="my_group")
        def f2(self):
            return "ok"

    async_actor = AsyncActor.remote()
    async_actor.f1.remote()
    assert "ok" == ray.get(async_actor.f2.remote())
    ray.kill(async_actor)  # ours: the actor's f1 sleeps on; end it now rather than at the module's shutdown


def test_blocking_group_does_not_block_others() -> None:
    """test_concurrency_group.py::test_blocking_group_does_not_block_others (Ray issue 19593)."""

    @ray.remote(concurrency_groups={"group1": 1, "group2": 1})
    class AsyncActor:
        def __init__(self):
            pass

        @ray.method(concurrency_group="group1")
        async def f1(self):
            time.sleep(10000)
            return "never return"

        @ray.method(concurrency_group="group2")
        def f2(self):
            return "ok"

    async_actor = AsyncActor.remote()
    # Execute f1 twice for blocking the group1.
    obj_0 = async_actor.f1.remote()
    obj_1 = async_actor.f1.remote()
    # Wait a while to make sure f2 is scheduled after f1.
    ray.wait([obj_0, obj_1], timeout=5)
    # f2 should work well even if group1 is blocking.
    assert "ok" == ray.get(async_actor.f2.remote())
    ray.kill(async_actor)
