"""A Ray-shaped API over this runtime: ``import runtime.ray_compat as ray`` and typical Ray code runs unchanged.

    import runtime.ray_compat as ray

    @ray.remote
    class Counter:
        def __init__(self, start):            # positional parameters are fine: bound to names on the caller
            self.n = start
        def add(self, k):
            self.n += k
            return self.n
        def count_to(self, k):                # a generator method streams (Ray's num_returns="streaming")
            yield from range(k)

    ray.init(num_cpus=4)
    c = Counter.options(name="c", max_restarts=1).remote(5)
    assert ray.get(c.add.remote(1)) == 6
    assert [ray.get(r) for r in c.count_to.remote(3)] == [0, 1, 2]

Actors are ``runtime.spawn`` actors on this machine, tasks run on a pool of worker processes; what differs from Ray,
and why, is in README "Coming from Ray"; an option that cannot be honoured raises at once, naming the alternative.
"""

import cloudpickle

# errors are ray.exceptions classes (``except ValueError`` still catches a task's ValueError)
from runtime.ray_compat import actor, exceptions, util
from runtime.ray_compat.actors import method
from runtime.ray_compat.api import (
    available_resources,
    cancel,
    cluster_resources,
    get,
    get_actor,
    init,
    is_initialized,
    kill,
    nodes,
    put,
    shutdown,
    wait,
)
from runtime.ray_compat.refs import ObjectRef, ObjectRefGenerator
from runtime.ray_compat.remote import remote
from runtime.ray_compat.runtime_context import get_gpu_ids, get_runtime_context

__all__ = [
    "ObjectRef",
    "ObjectRefGenerator",
    "actor",
    "available_resources",
    "cancel",
    "cloudpickle",
    "cluster_resources",
    "exceptions",
    "get",
    "get_actor",
    "get_gpu_ids",
    "get_runtime_context",
    "init",
    "is_initialized",
    "kill",
    "method",
    "nodes",
    "put",
    "remote",
    "shutdown",
    "util",
    "wait",
]


def __getattr__(name: str) -> object:
    """A Ray API this module does not provide: an AttributeError naming it and what there is instead."""
    raise AttributeError(
        f"ray.{name} is not provided by runtime.ray_compat (README 'Coming from Ray' lists what is); "
        f"available: {', '.join(sorted(__all__))}"
    )
