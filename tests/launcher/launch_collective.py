"""A collective group across network-namespace hosts (tests/launcher/test_netns_cluster.py): the worker class and
the job, importable on every host (PYTHONPATH is tests/launcher)."""

from __future__ import annotations

import json
import os
from typing import Any

import torch

import runtime
from runtime import collective
from runtime.collective import create_group, destroy_group
from runtime.tensors.tensor_refs import TensorRef

MEMBER = {"kind": "serve", "actor_class": "launch_collective:Member", "kwargs": {}}


class Member:
    def __init__(self) -> None:
        self.held: dict[str, torch.Tensor] = {}

    def where(self) -> str:
        return os.environ.get("MILES_HOST", "?")

    def put(self, seed: int, shape: list[int]) -> TensorRef:
        self.held = {"w": torch.randn(shape, generator=torch.Generator().manual_seed(seed))}
        return runtime.put(self.held, transport="collective")

    def held_sum(self) -> float:
        return float(self.held["w"].double().sum())

    def pull_sum(self, ref: TensorRef) -> float:
        into = {"w": torch.zeros(ref.specs[0].shape)}
        ref.get(into=into, timeout=30)
        ref.free()
        return float(into["w"].double().sum())

    def all_reduce(self, value: float) -> float:
        tensor = torch.tensor([value])
        torch.distributed.all_reduce(tensor, group=collective.get_group("across"))
        return float(tensor.item())


def collective_across(ctx: Any) -> int:
    """Two members on two hosts: a group, an all_reduce and a tensor ref pulled across; print one JSON line."""
    handles = ctx.handles("c")
    group = create_group(handles, backend="gloo", name="across", timeout_s=30)
    try:
        reduced = [call.result(timeout=30) for call in [h.all_reduce(float(i + 1)) for i, h in enumerate(handles)]]
        ref = handles[0].put(3, [256, 256]).result(timeout=30)
        result = {
            "hosts": [h.where().result(timeout=20) for h in handles],
            "endpoints": [h.endpoint for h in handles],
            "reduced": reduced,
            "pulled": handles[1].pull_sum(ref).result(timeout=30),
            "held": handles[0].held_sum().result(timeout=20),
        }
    finally:
        destroy_group(group)
    print("COLLECTIVE " + json.dumps(result), flush=True)
    return 0
