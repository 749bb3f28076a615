"""The reference model: this rank's slice of the initial weights, kept on the CPU (as miles keeps it), for the KL.

Checkpoints save and restore it (actors/trainer/checkpoint.py), so a resumed run keeps the KL to the same reference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor


class ReferenceWeights:
    """A CPU copy of named parameters, swapped in for a no-grad forward, so no second model is built; TP ranks each
    hold and swap their own slices."""

    def __init__(self, named: dict[str, Tensor]) -> None:
        self.tensors = {name: p.detach().to("cpu", copy=True) for name, p in named.items()}

    def load(self, tensors: dict[str, Tensor]) -> None:
        """Replace the copy (from a checkpoint); names and shapes must match."""
        if set(tensors) != set(self.tensors):
            raise ValueError(f"reference weights differ in names: {sorted(set(tensors) ^ set(self.tensors))[:5]}")
        for name, value in tensors.items():
            if value.shape != self.tensors[name].shape:
                expected = list(self.tensors[name].shape)
                raise ValueError(f"reference {name}: saved shape {list(value.shape)}, model {expected}")
            self.tensors[name] = value.detach().to("cpu", copy=True)

    @contextlib.contextmanager
    def swapped_in(self, named: dict[str, Tensor]) -> Iterator[None]:
        """The parameters hold the reference weights inside the block, their own values again after it."""
        with torch.no_grad():
            current = {name: p.detach().clone() for name, p in named.items()}
            try:
                for name, param in named.items():
                    param.copy_(self.tensors[name].to(param.device))
                yield
            finally:
                for name, param in named.items():
                    param.copy_(current[name])
