"""Checksums of named tensors, to compare weights across ranks, steps and checkpoints."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import torch
from torch import Tensor


def digest_named_tensors(named_tensors: Iterable[tuple[str, Tensor]]) -> str:
    """sha256 over names, dtypes, shapes and raw bytes, in the given order (hex)."""
    digest = hashlib.sha256()
    for name, tensor in named_tensors:
        data = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{data.dtype}|{tuple(data.shape)}|".encode())
        digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
