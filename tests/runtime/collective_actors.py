"""Actors for the collective-group and tensor-ref tests (imported by dotted path in the actor processes)."""

from __future__ import annotations

import asyncio
import time

import torch
import torch.distributed as dist

import runtime
from runtime import collective
from runtime.tensors.tensor_refs import TensorRef
from runtime.tensors.tensor_store import store


def seeded(seed: int, shapes: dict[str, list[int]], dtype: str = "float32") -> dict[str, torch.Tensor]:
    """The same tensors in every process for the same seed (the tests rebuild them to compare)."""
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(shape, generator=generator).to(getattr(torch, dtype)) for name, shape in shapes.items()}


class Member:
    """A member of collective groups: puts, pulls and reduces tensors."""

    def __init__(self) -> None:
        self.held: dict[str, torch.Tensor] = {}
        self.buffers: dict[str, torch.Tensor] = {}

    def rank(self, group: str) -> int:
        return collective.member(group).rank

    def all_reduce(self, group: str, value: float) -> float:
        tensor = torch.tensor([value])
        dist.all_reduce(tensor, group=collective.get_group(group))
        return float(tensor.item())

    def put(self, seed: int, shapes: dict[str, list[int]], readers: int = 1, group: str | None = None) -> TensorRef:
        self.held = seeded(seed, shapes)
        return runtime.put(self.held, transport="collective", group=group, readers=readers)

    def put_one(self, seed: int, shape: list[int]) -> TensorRef:
        return runtime.put(seeded(seed, {"t": shape})["t"], transport="collective")

    def ref_info(self, ref: TensorRef) -> dict[str, int] | None:
        return store.info(ref.key)

    async def wait_freed(self, refs: list[TensorRef], timeout: float) -> str:
        """Async, so waits run beside the default lane's calls (a thread each: wait_freed blocks)."""
        await asyncio.to_thread(collective.wait_freed, refs, timeout)
        return "freed"

    def busy(self, seconds: float) -> float:
        """Hold the default lane, as a long training step would."""
        time.sleep(seconds)
        return seconds

    def pull(self, ref: TensorRef, free: bool = True) -> dict[str, torch.Tensor]:
        """Receive into buffers allocated here first (as live weights); returns them and checks they stayed put."""
        self.buffers = {spec.name: torch.zeros(spec.shape, dtype=getattr(torch, spec.dtype)) for spec in ref.specs}
        addresses = {name: tensor.data_ptr() for name, tensor in self.buffers.items()}
        got = ref.get(into=self.buffers, timeout=30)
        assert all(got[name].data_ptr() == address for name, address in addresses.items())
        if free:
            ref.free()
        return got

    def pull_one(self, ref: TensorRef, max_bytes: int | None = None) -> torch.Tensor:
        return ref.get(timeout=30) if max_bytes is None else ref.get(timeout=30, max_bytes=max_bytes)

    def pull_into(self, ref: TensorRef, into: dict[str, list[int]], dtype: str = "float32") -> dict[str, float]:
        """Receive into buffers of the given shapes (maybe wrong ones); returns each buffer's sum afterwards."""
        self.buffers = {name: torch.zeros(shape, dtype=getattr(torch, dtype)) for name, shape in into.items()}
        try:
            ref.get(into=self.buffers, timeout=30)
        finally:
            self.sums = {name: float(tensor.float().sum()) for name, tensor in self.buffers.items()}
        return self.sums

    def buffer_sums(self) -> dict[str, float]:
        return self.sums

    def stall_transfer(self, ref: TensorRef, group: str) -> str:
        """A receiver that asks for the bytes and then stops reading (a hung process): the owner is left mid-send."""
        ref.owner.method("__tensor_send__")(ref.key, collective.member(group).rank, 4242)
        time.sleep(60)
        return "never"
