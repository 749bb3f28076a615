"""``ray.util.collective`` (also ``from ray.util.collective import collective``): :mod:`.collective`."""

from runtime.ray_compat.util.collective import collective
from runtime.ray_compat.util.collective.collective import (
    ReduceOp,
    allgather,
    allreduce,
    barrier,
    broadcast,
    create_collective_group,
    destroy_collective_group,
    get_collective_group_size,
    get_rank,
    init_collective_group,
    is_group_initialized,
    recv,
    reduce,
    send,
)

__all__ = [
    "ReduceOp",
    "allgather",
    "allreduce",
    "barrier",
    "broadcast",
    "collective",
    "create_collective_group",
    "destroy_collective_group",
    "get_collective_group_size",
    "get_rank",
    "init_collective_group",
    "is_group_initialized",
    "recv",
    "reduce",
    "send",
]
