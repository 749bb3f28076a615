"""Ray's own tests/test_streaming_generator.py (ray-project/ray python/ray/tests at 0554db9a, Apache-2.0), ported:
the test bodies keep Ray's calls; only the fixture (one ray.init for the module, for Ray's shutdown_only + ray.init)
and the import of ObjectRefGenerator (ray._raylet's, runtime.ray_compat.refs' here) are ours.

Ported: test_actor_streaming_generator (both store_in_plasma), test_streaming_generator_exception, and of
test_generator_basic its "Basic cases" and "Exceptions" parts. Not ported, and why: the *_unit tests (mock Ray's
core worker), tests reading ``list_objects`` or injecting RPC delays (``RAY_testing_asio_delay_us``: Ray's object
store and gRPC), test_generator_dist_chain and test_next_sync_timeout_when_generator_ref_unavailable (a multi-node
cluster, lost nodes); test_generator_basic's actor-kill, retry and cancel parts (not read case by case yet).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

import runtime.ray_compat as ray
from runtime.ray_compat.refs import ObjectRefGenerator

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module", autouse=True)
def shutdown_only() -> Iterator[None]:
    ray.init(num_cpus=1)
    try:
        yield
    finally:
        ray.shutdown()


def test_generator_basic() -> None:
    """test_streaming_generator.py::test_generator_basic, its "Basic cases" and "Exceptions" parts."""

    @ray.remote
    def f():
        for i in range(5):  # noqa: UP028 - as Ray's test
            yield i

    gen = f.remote()
    i = 0
    for ref in gen:
        assert i == ray.get(ref)
        del ref
        i += 1

    @ray.remote
    def g():
        for i in range(5):
            if i == 2:
                raise ValueError
            yield i

    gen = g.remote()
    ray.get(next(gen))
    ray.get(next(gen))
    with pytest.raises(ray.exceptions.RayTaskError):
        ray.get(next(gen))
    with pytest.raises(StopIteration):
        ray.get(next(gen))
    with pytest.raises(StopIteration):
        ray.get(next(gen))


@pytest.mark.parametrize("store_in_plasma", [False, True])
def test_actor_streaming_generator(store_in_plasma) -> None:
    """test_streaming_generator.py::test_actor_streaming_generator: sync and async generators of an actor, read
    with next, for, __anext__ and async for."""

    @ray.remote
    class Actor:
        def f(self, ref):
            for i in range(3):  # noqa: UP028 - as Ray's test
                yield i

        async def async_f(self, ref):
            for i in range(3):
                await asyncio.sleep(0.1)
                yield i

        def g(self):
            return 3

    a = Actor.remote()
    if store_in_plasma:
        arr = np.random.rand(5 * 1024 * 1024)
    else:
        arr = 3

    def verify_sync_task_executor():
        generator = a.f.remote(ray.put(arr))
        # Verify it works with next.
        assert isinstance(generator, ObjectRefGenerator)
        assert ray.get(next(generator)) == 0
        assert ray.get(next(generator)) == 1
        assert ray.get(next(generator)) == 2
        with pytest.raises(StopIteration):
            ray.get(next(generator))

        # Verify it works with for.
        generator = a.f.remote(ray.put(3))
        for index, ref in enumerate(generator):
            assert index == ray.get(ref)

    def verify_async_task_executor():
        # Verify it works with next.
        generator = a.async_f.remote(ray.put(arr))
        assert isinstance(generator, ObjectRefGenerator)
        assert ray.get(next(generator)) == 0
        assert ray.get(next(generator)) == 1
        assert ray.get(next(generator)) == 2

        # Verify it works with for.
        generator = a.f.remote(ray.put(3))
        for index, ref in enumerate(generator):
            assert index == ray.get(ref)

    async def verify_sync_task_async_generator():
        # Verify anext
        async_generator = a.f.remote(ray.put(arr))
        assert isinstance(async_generator, ObjectRefGenerator)
        for expected in range(3):
            ref = await async_generator.__anext__()
            assert await ref == expected
        with pytest.raises(StopAsyncIteration):
            await async_generator.__anext__()

        # Verify async for.
        async_generator = a.f.remote(ray.put(arr))
        expected = 0
        async for ref in async_generator:
            value = await ref
            assert expected == value
            expected += 1

    async def verify_async_task_async_generator():
        async_generator = a.async_f.remote(ray.put(arr))
        assert isinstance(async_generator, ObjectRefGenerator)
        for expected in range(3):
            ref = await async_generator.__anext__()
            assert await ref == expected
        with pytest.raises(StopAsyncIteration):
            await async_generator.__anext__()

        # Verify async for.
        async_generator = a.async_f.remote(ray.put(arr))
        expected = 0
        async for ref in async_generator:
            value = await ref
            assert expected == value
            expected += 1

    verify_sync_task_executor()
    verify_async_task_executor()
    asyncio.run(verify_sync_task_async_generator())
    asyncio.run(verify_async_task_async_generator())


def test_streaming_generator_exception() -> None:
    """test_streaming_generator.py::test_streaming_generator_exception: the error, then StopIteration for good."""

    @ray.remote
    class Actor:
        def f(self):
            raise ValueError
            yield 1

        async def async_f(self):
            raise ValueError
            yield 1

    a = Actor.remote()
    g = a.f.remote()
    with pytest.raises(ValueError):
        ray.get(next(g))

    with pytest.raises(StopIteration):
        ray.get(next(g))

    with pytest.raises(StopIteration):
        ray.get(next(g))

    g = a.async_f.remote()
    with pytest.raises(ValueError):
        ray.get(next(g))

    with pytest.raises(StopIteration):
        ray.get(next(g))

    with pytest.raises(StopIteration):
        ray.get(next(g))
