"""``ray.util.collective`` over :mod:`runtime.collective`: groups of actors by name, gloo here, NCCL on GPUs
(Ray's python/ray/util/collective/collective.py). The operations run torch.distributed on the group's tensors in
place, as Ray's do; ``backend="nccl"`` needs CUDA tensors, as in Ray."""

from __future__ import annotations

import time
from typing import Any

from runtime import collective as native
from runtime.caller.client import ClientRuntime
from runtime.names import naming
from runtime.objects.object_owner import own_handle
from runtime.tensors.collective_groups import get_group, group_names, join, leave, member, open_store

DEFAULT_TIMEOUT_S = 300.0
_POLL_S = 0.05


class ReduceOp:
    """Ray's ReduceOp names, mapped to torch.distributed's when used."""

    SUM, PRODUCT, MIN, MAX = "SUM", "PRODUCT", "MIN", "MAX"


def _dist() -> Any:
    import torch.distributed as dist

    return dist


def _op(op: Any) -> Any:
    name = getattr(op, "name", op)
    try:
        return getattr(_dist().ReduceOp, str(name).upper())
    except AttributeError:
        raise ValueError(f"ray.util.collective: unknown reduce op {op!r}; use ReduceOp.SUM/PRODUCT/MIN/MAX") from None


def create_collective_group(
    actors: list[Any], world_size: int, ranks: list[int], backend: str = "nccl", group_name: str = "default"
) -> None:
    """From the driver: make ``actors`` (``ranks[i]`` is ``actors[i]``'s rank) the group ``group_name``; returns
    once every actor joined (on its collective lane, so a busy actor joins too)."""
    if len(actors) != world_size or sorted(ranks) != list(range(world_size)):
        raise ValueError(
            f"create_collective_group({group_name!r}): {len(actors)} actors and ranks {ranks} for world_size "
            f"{world_size}; give one actor per rank 0..{world_size - 1}"
        )
    by_rank = [native_handle for _, native_handle in sorted(zip(ranks, (a.native for a in actors), strict=True))]
    native.create_group(by_rank, backend=str(backend).lower(), name=group_name, timeout_s=DEFAULT_TIMEOUT_S)


def init_collective_group(
    world_size: int, rank: int, backend: str = "nccl", group_name: str = "default", timeout_s: float = DEFAULT_TIMEOUT_S
) -> None:
    """Inside an actor: join ``group_name`` as ``rank``, meeting the other ranks by name; blocks until all joined.

    Each rank registers itself as ``ray-collective.<group>.<rank>``; the call returns once all ``world_size`` ranks
    are in, or fails past ``timeout_s`` naming the ranks that never came. The group is then made by
    runtime.collective's rendezvous (rank 0 keeps the keys, the others reach them over the actor transport)."""
    found = own_handle()
    if found is None:
        raise RuntimeError("ray.util.collective.init_collective_group is called inside an actor (each rank's)")
    me = found[0]
    if rank == 0:
        open_store(group_name, world_size, timeout_s)
    runtime = ClientRuntime.get()
    runtime.run(naming.register_name_async(_key(group_name, rank), me), timeout_s=30, what="register the rank")
    deadline = time.monotonic() + timeout_s
    members: list[Any] = []
    for other in range(world_size):
        while True:
            try:
                members.append(me if other == rank else naming.get_actor(_key(group_name, other)))
                break
            except KeyError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"collective group {group_name!r}: rank {other} did not call init_collective_group within "
                        f"{timeout_s} s (ranks found: {len(members)} of {world_size})"
                    ) from None
                time.sleep(_POLL_S)
    host = members[0].host or "127.0.0.1"
    join(group_name, str(backend).lower(), rank, world_size, host, timeout_s, members)


def _key(group_name: str, rank: int) -> str:
    return f"ray-collective.{group_name}.{rank}"


def is_group_initialized(group_name: str = "default") -> bool:
    return group_name in group_names()


def destroy_collective_group(group_name: str = "default") -> None:
    leave(group_name)


def get_rank(group_name: str = "default") -> int:
    return member(group_name).rank if is_group_initialized(group_name) else -1


def get_collective_group_size(group_name: str = "default") -> int:
    return member(group_name).world_size if is_group_initialized(group_name) else -1


def allreduce(tensor: Any, group_name: str = "default", op: Any = ReduceOp.SUM) -> None:
    _dist().all_reduce(tensor, op=_op(op), group=get_group(group_name))


def reduce(tensor: Any, dst_rank: int = 0, group_name: str = "default", op: Any = ReduceOp.SUM) -> None:
    _dist().reduce(tensor, dst_rank, op=_op(op), group=get_group(group_name))


def broadcast(tensor: Any, src_rank: int = 0, group_name: str = "default") -> None:
    _dist().broadcast(tensor, src_rank, group=get_group(group_name))


def allgather(tensor_list: list[Any], tensor: Any, group_name: str = "default") -> None:
    _dist().all_gather(tensor_list, tensor, group=get_group(group_name))


def barrier(group_name: str = "default") -> None:
    _dist().barrier(group=get_group(group_name))


def send(tensor: Any, dst_rank: int, group_name: str = "default") -> None:
    _dist().send(tensor, dst_rank, group=get_group(group_name))


def recv(tensor: Any, src_rank: int, group_name: str = "default") -> None:
    _dist().recv(tensor, src_rank, group=get_group(group_name))
