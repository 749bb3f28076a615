"""The Ray documentation's examples, rewritten, run with ``import runtime.ray_compat as ray``.

Each test names the page of docs.ray.io (ray-core) it ports; the code follows the page's own example (sizes and
sleeps made small). Ray sources read: python/ray/actor.py, remote_function.py, exceptions.py,
util/placement_group.py, _private/worker.py, and doc/source/ray-core/doc_code/streaming_generator.py.
One session and its task pool are shared by the module's tests; real processes throughout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

import runtime.ray_compat as ray
from runtime.ray_compat.util.scheduling_strategies import PlacementGroupSchedulingStrategy

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module", autouse=True)
def session() -> Iterator[None]:
    ray.init(num_cpus=4, num_gpus=2, resources={"accelerator": 1})
    try:
        yield
    finally:
        ray.shutdown()


@ray.remote
class Counter:
    def __init__(self, start=0):
        self.value = start

    def increment(self):
        self.value += 1
        return self.value

    def get_counter(self):
        return self.value

    def numbers(self, n):
        yield from range(n)


@ray.remote
def square(x):
    return x * x


def test_actors_page_counter_and_handles_passed_to_tasks() -> None:
    """ray-core/actors.html: "Specifying required resources", "Calling the actor", "Passing around actor handles"."""
    counter = Counter.remote()
    assert ray.get(counter.increment.remote()) == 1
    counters = [Counter.remote(), Counter.options(name="doc-counter").remote(10)]
    assert ray.get([c.increment.remote() for c in counters]) == [1, 11]

    @ray.remote
    def f(counter):
        for _ in range(3):
            ray.get(counter.increment.remote())
        return ray.get(counter.get_counter.remote())

    assert sorted(ray.get([f.remote(counter) for _ in range(2)]))[-1] == 7  # 1 + 2 tasks x 3, in some order
    assert ray.get(counter.get_counter.remote()) == 7
    same = ray.get_actor("doc-counter")  # ray-core/actors/named-actors.html
    assert ray.get(same.increment.remote()) == 12
    with pytest.raises(ValueError, match="Failed to look up actor with name 'nobody'"):
        ray.get_actor("nobody")
    ray.kill(counters[1])  # ray-core/actors/terminating-actors.html
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(counters[1].increment.remote(), timeout=10)


def test_named_actor_get_if_exists() -> None:
    """ray-core/actors/named-actors.html: "Get-Or-Create a Named Actor"."""
    a = Counter.options(name="goc", get_if_exists=True).remote()
    b = Counter.options(name="goc", get_if_exists=True).remote()
    assert ray.get(a.increment.remote()) == 1
    assert ray.get(b.increment.remote()) == 2  # the same actor
    ray.kill(a)
    other = Counter.options(name="in-ns", namespace="other-ns").remote()  # "Named actors": namespaces
    assert ray.get(ray.get_actor("in-ns", namespace="other-ns").increment.remote()) == 1
    with pytest.raises(ValueError, match="Failed to look up actor with name 'in-ns'"):
        ray.get_actor("in-ns")
    ray.kill(other)


def test_tasks_page_refs_multiple_returns_and_wait() -> None:
    """ray-core/tasks.html: "Passing object refs to Ray tasks", "Waiting for partial results", "Multiple returns"."""
    obj_ref1 = square.remote(3)
    obj_ref2 = square.remote(obj_ref1)  # a top-level ref is resolved to its value
    assert ray.get(obj_ref2) == 81

    @ray.remote(num_returns=3)
    def return_multiple():
        return 0, 1, 2

    a, b, c = return_multiple.remote()
    assert ray.get([a, b, c]) == [0, 1, 2]

    @ray.remote
    def slow_function(seconds):
        time.sleep(seconds)
        return seconds

    object_refs = [slow_function.remote(2.0), slow_function.remote(0.01)]
    ready_refs, remaining_refs = ray.wait(object_refs, num_returns=1, timeout=None)
    assert ready_refs == [object_refs[1]] and remaining_refs == [object_refs[0]]
    assert ray.wait([object_refs[0]], timeout=0) == ([], [object_refs[0]])


def test_objects_page_put_nested_refs_and_get_timeout() -> None:
    """ray-core/objects.html: "Passing Object Arguments" (top-level resolved, nested passed as refs),
    "Fetching Object Data" (GetTimeoutError)."""

    @ray.remote
    def echo_and_get(x_list):  # list of ObjectRefs, passed as they are
        return [type(x).__name__ for x in x_list], ray.get(x_list)

    a, b = ray.put(1), square.remote(2)
    assert ray.get(echo_and_get.remote([a, b])) == (["ObjectRef", "ObjectRef"], [1, 4])

    @ray.remote
    def long_running_function():
        time.sleep(3)

    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(long_running_function.remote(), timeout=0.2)


def test_task_exceptions_and_retries() -> None:
    """ray-core/fault_tolerance/tasks.html: "Catching application-level failures" and ``retry_exceptions``."""

    class MyException(Exception):
        pass

    @ray.remote
    def f():
        raise MyException("this is a failure")

    with pytest.raises(ray.exceptions.RayTaskError) as info:
        ray.get(f.remote())
    assert "this is a failure" in str(info.value)

    @ray.remote(max_retries=2, retry_exceptions=[ValueError])
    def flaky(counter):
        if ray.get(counter.increment.remote()) < 3:
            raise ValueError("not yet")
        return "done"

    counter = Counter.remote()
    assert ray.get(flaky.remote(counter)) == "done"  # two failures retried
    with pytest.raises(ValueError, match="not yet"):  # except ValueError works on the RayTaskError
        ray.get(flaky.options(retry_exceptions=False).remote(Counter.remote()))


@ray.remote
class AsyncActor:
    async def run_concurrent(self, delay):
        await asyncio.sleep(delay)
        return delay

    async def numbers(self, n):
        for i in range(n):
            await asyncio.sleep(0)
            yield i


def test_async_actor_runs_calls_concurrently() -> None:
    """ray-core/actors/async_api.html: "AsyncIO for Actors"."""
    actor = AsyncActor.remote()
    started = time.monotonic()
    assert ray.get([actor.run_concurrent.remote(0.5) for _ in range(4)]) == [0.5] * 4
    assert time.monotonic() - started < 1.5  # concurrently, not 4 x 0.5 s

    async def from_async() -> int:
        return await actor.run_concurrent.remote(0.01)

    assert asyncio.run(from_async()) == 0.01


@ray.remote(concurrency_groups={"io": 2, "compute": 1})
class AsyncIOActor:
    @ray.method(concurrency_group="io")
    async def f1(self):
        return "io"

    @ray.method(concurrency_group="compute")
    async def f2(self):
        return "compute"

    async def f3(self):
        return "default"


def test_concurrency_groups_page() -> None:
    """ray-core/actors/concurrency_group_api.html: "Defining Concurrency Groups"."""
    a = AsyncIOActor.remote()
    assert ray.get([a.f1.remote(), a.f2.remote(), a.f3.remote()]) == ["io", "compute", "default"]
    assert ray.get(a.f3.options(concurrency_group="compute").remote()) == "default"


def test_streaming_generator_page() -> None:
    """ray-core/ray-generator.html: getting started, error handling, actors, asyncio, ray.wait on a generator."""

    @ray.remote
    def task():
        for i in range(3):
            time.sleep(0.05)
            yield i

    gen = task.remote()
    assert ray.get(next(gen)) == 0
    assert [ray.get(ref) for ref in gen] == [1, 2]

    @ray.remote
    def failing():
        for i in range(5):
            if i == 1:
                raise ValueError
            yield i

    gen = failing.remote()
    assert ray.get(next(gen)) == 0
    with pytest.raises(ValueError):
        ray.get(next(gen))  # the error comes as the ref of the item where it happened
    with pytest.raises(StopIteration):
        next(gen)

    threaded = Counter.options(max_concurrency=5).remote()  # a threaded actor
    for actor in (Counter.remote(), AsyncActor.remote(), threaded):  # "Generator from Actor Tasks"
        assert [ray.get(ref) for ref in actor.numbers.remote(5)] == [0, 1, 2, 3, 4]

    async def main() -> list[int]:  # "Using the Ray generator with asyncio"
        return [await ref async for ref in task.remote()]

    assert asyncio.run(main()) == [0, 1, 2]

    @ray.remote
    def slow():
        time.sleep(0.5)
        yield 1

    gen = slow.remote()  # "How to wait for generator without blocking a thread"
    ready, unready = ray.wait([gen], timeout=0)
    assert (ready, unready) == ([], [gen])
    ready, unready = ray.wait([gen])
    assert ready == [gen]
    assert ray.get(next(gen)) == 1


@ray.remote(num_cpus=1)
class GPUActor:
    def gpus(self):
        return ray.get_gpu_ids(), ray.get_runtime_context().get_accelerator_ids()

    def who(self):
        context = ray.get_runtime_context()
        return context.get_actor_id(), context.current_actor  # a handle to itself, sent back

    def ping(self):
        return "pong"


def test_placement_group_page() -> None:
    """ray-core/scheduling/placement-group.html: create, ``ready()``, schedule actors into bundles, remove."""
    pg = ray.util.placement_group([{"CPU": 1, "GPU": 1}, {"CPU": 1, "GPU": 1}], strategy="PACK")
    assert ray.get(pg.ready(), timeout=10) is pg
    ready, unready = ray.wait([pg.ready()], timeout=10)
    assert len(ready) == 1 and not unready
    assert ray.available_resources()["GPU"] == 0
    actors = [
        GPUActor.options(
            num_gpus=1,
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=i),
        ).remote()
        for i in range(2)
    ]
    gpus = ray.get([a.gpus.remote() for a in actors])
    assert sorted(ids for ids, _ in gpus) == [[0], [1]]  # each bundle's own GPU, in CUDA_VISIBLE_DEVICES
    assert gpus[0][1] == {"GPU": [str(gpus[0][0][0])]}
    with pytest.raises(ValueError, match="asks for GPU=1 but this cluster has 0 free"):
        GPUActor.options(num_gpus=1).remote()  # Ray would leave it pending forever
    ray.util.remove_placement_group(pg)
    assert ray.available_resources()["GPU"] == 2
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actors[0].gpus.remote(), timeout=10)  # removing a group kills its actors, as in Ray
    with pytest.raises(ValueError, match="STRICT_SPREAD"):
        ray.util.placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")


def test_runtime_context_and_cluster() -> None:
    """ray-core/api/doc/ray.runtime_context.RuntimeContext.html and ray.nodes / ray.cluster_resources."""
    actor = GPUActor.options(runtime_env={"env_vars": {"DOC_VAR": "1"}}).remote()
    actor_id, itself = ray.get(actor.who.remote(), timeout=10)
    assert actor_id == actor._actor_id.hex()
    assert ray.get(itself.ping.remote(), timeout=10) == "pong"
    assert ray.get_runtime_context().get_actor_id() is None  # the driver is no actor
    assert ray.cluster_resources()["CPU"] == 4 and ray.cluster_resources()["accelerator"] == 1
    assert ray.nodes()[0]["Alive"] and ray.nodes()[0]["Resources"]["GPU"] == 2
    assert ray.is_initialized()


def test_exit_actor_and_actor_died_error() -> None:
    """ray-core/actors/terminating-actors.html: "Manual termination within the actor"."""

    @ray.remote
    class Exiting:
        def exit(self):
            ray.actor.exit_actor()

    actor = Exiting.remote()
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(actor.exit.remote(), timeout=10)
