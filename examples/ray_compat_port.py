"""A Ray script ported by changing one import: README "Coming from Ray" (runtime.ray_compat)."""

from __future__ import annotations

import runtime.ray_compat as ray
from runtime.ray_compat.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@ray.remote
class Counter:
    def __init__(self, start=0):  # positional parameters: bound to names on the caller
        self.value = start

    def increment(self):
        self.value += 1
        return self.value

    def numbers(self, n):  # a generator method: a stream (num_returns="streaming")
        yield from range(n)


@ray.remote(num_returns=2, max_retries=2, retry_exceptions=[ConnectionError])
def split(x):
    return x // 2, x % 2


ray.init(num_cpus=4, num_gpus=2)
counter = Counter.options(name="counter", max_restarts=1, max_task_retries=-1).remote(10)
assert ray.get(counter.increment.remote()) == 11
assert [ray.get(ref) for ref in counter.numbers.remote(3)] == [0, 1, 2]
half, rest = split.remote(counter.increment.remote())  # a top-level ref argument is resolved first
assert ray.get([half, rest]) == [6, 0]
ready, pending = ray.wait([split.remote(7)[0]], timeout=5)
pg = ray.util.placement_group([{"CPU": 1, "GPU": 1}] * 2, strategy="PACK")
ray.get(pg.ready())
learner = Counter.options(num_gpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0)).remote()
try:
    ray.get(counter.missing_method.remote())
except AttributeError:
    pass
ray.shutdown()
print("ray_compat port: ok")
