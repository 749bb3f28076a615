"""``runtime.put``: a plain object ref, or (``transport="collective"``) a device-resident tensor ref."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runtime.objects import object_owner
from runtime.objects.object_refs import ObjectRef
from runtime.tensors import collective_groups, tensor_transfer
from runtime.tensors.collective_groups import CollectiveError
from runtime.tensors.member_watch import MemberWatch
from runtime.tensors.tensor_refs import SINGLE, TensorRef
from runtime.tensors.tensor_store import store

TRANSPORTS = ("collective",)


def put(value: Any, *, transport: str | None = None, group: str | None = None, readers: int = 1) -> Any:
    """Keep ``value`` here and return a ref to it (Ray's ``ray.put(value, _tensor_transport=...)``).

    ``put(value)`` is :func:`runtime.objects.object_owner.put`. With ``transport="collective"`` a tensor or a dict of
    named tensors stays here, uncopied (non-contiguous ones are made contiguous), and the
    :class:`~runtime.tensors.tensor_refs.TensorRef`'s bytes move over ``group`` (default: the one group this process
    is in). The owner keeps the tensors until ``readers`` holders called ``ref.free()``; don't change them before
    :func:`wait_freed` returns (how a fixed bucket is reused safely). Call both in an actor's methods, once it is a
    member of the group."""
    if transport is None:
        if group is not None or readers != 1:
            raise ValueError("runtime.put: group= and readers= go with transport='collective'")
        return object_owner.put(value)
    if transport not in TRANSPORTS:
        raise ValueError(f"runtime.put: transport {transport!r} is not one of {list(TRANSPORTS)} (or None)")
    return put_tensors(value, group=group, readers=readers)


def put_tensors(value: Any, *, group: str | None = None, readers: int = 1) -> TensorRef:
    import torch

    if not isinstance(readers, int) or readers < 1:
        raise ValueError(f"runtime.put: readers={readers!r} must be a positive int (how many will free the ref)")
    single = isinstance(value, torch.Tensor)
    tensors = {SINGLE: value} if single else value
    if not isinstance(tensors, dict) or not tensors:
        raise TypeError("runtime.put(transport='collective') takes a tensor or a non-empty dict of name -> tensor")
    member = collective_groups.member(_group_name(group))
    device = tensor_transfer.device_of(member).type
    kept: dict[str, Any] = {}
    for name, tensor in tensors.items():
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
            raise TypeError(f"runtime.put(transport='collective'): {name!r} must map a str to a tensor")
        if tensor.device.type != device:
            raise ValueError(
                f"tensor {name!r} is on {tensor.device}; group {member.name!r} ({member.backend}) moves {device} "
                "tensors (gloo: CPU, nccl: CUDA)"
            )
        kept[name] = tensor.detach() if tensor.is_contiguous() else tensor.detach().contiguous()
    specs = tensor_transfer.spec_list(kept)
    key = store.put(kept, member.name, readers)
    return TensorRef(object_owner.owner_handle(), key, member.name, member.rank, specs, single=single)


def _group_name(group: str | None) -> str:
    if group is not None:
        return group
    names = collective_groups.group_names()
    if len(names) != 1:
        raise CollectiveError(
            f"runtime.put(transport='collective') needs group=: this process is in {len(names)} collective groups "
            f"({names}); make one with runtime.collective.create_group"
        )
    return names[0]


def wait_freed(refs: Iterable[TensorRef | ObjectRef], timeout: float | None = 60.0) -> None:
    """In the owner: block until every reader freed each of ``refs`` (then their tensors may be reused).
    Raises ActorDied if a receiver died during a transfer of one, or a member of a ref's group died while the ref
    still waited for readers (found within a few seconds: :mod:`runtime.tensors.member_watch`); TimeoutError naming the
    refs still held."""
    keys = []
    for ref in refs:
        if not isinstance(ref, TensorRef):
            raise TypeError(f"wait_freed takes TensorRefs, not {type(ref).__name__}")
        keys.append(ref.key)
    store.wait_freed(keys, timeout, MemberWatch().dead_member)
