"""How named CPU tensors travel in SGLang's ``/update_weights_from_tensor`` body on the CPU engine.

Real SGLang's ``serialized_named_tensors`` (MultiprocessingSerializer, one string per TP rank) only works for
same-host CUDA IPC; the CPU engine accepts the same field with this portable encoding instead.
"""

from __future__ import annotations

import base64
import io

import torch


def encode_named_tensors(named_tensors: list[tuple[str, torch.Tensor]]) -> str:
    """Serialize ``(name, tensor)`` pairs (CPU tensors) into one base64 string: base64 of ``torch.save`` of the
    list of pairs."""
    buffer = io.BytesIO()
    torch.save([(name, tensor.detach().cpu().contiguous()) for name, tensor in named_tensors], buffer)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def decode_named_tensors(payload: str) -> list[tuple[str, torch.Tensor]]:
    """Inverse of :func:`encode_named_tensors`; loads tensors only (``weights_only``)."""
    raw = base64.b64decode(payload.encode("ascii"), validate=True)
    pairs = torch.load(io.BytesIO(raw), weights_only=True)
    return [(str(name), tensor) for name, tensor in pairs]
