"""Rotary inverse frequencies of a :class:`ModelConfig`, computed as transformers computes them.

Shared by the trainer (Megatron's RoPE gets these frequencies) and the CPU engine, so both rotate queries and
keys exactly like ``LlamaRotaryEmbedding`` and friends: default, ``linear`` and ``llama3`` scaling.
"""

from __future__ import annotations

import math

import torch

from actors.model_config import ModelConfig, RopeScaling


def rope_inv_freq(model: ModelConfig, *, device: torch.device | None = None) -> torch.Tensor:
    """``[head_dim // 2]`` float32 inverse frequencies (``rotate_half`` layout: apply to ``cat(f, f)``)."""
    dim = model.head_dim
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim
    inv_freq = 1.0 / (model.rope_theta**exponents)
    scaling = model.rope_scaling
    if scaling is None:
        return inv_freq
    if scaling.rope_type == "linear":
        return inv_freq / scaling.factor
    return _llama3(inv_freq, scaling)


def _llama3(inv_freq: torch.Tensor, scaling: RopeScaling) -> torch.Tensor:
    """Llama 3.1: long wavelengths divided by ``factor``, short ones kept, a smooth ramp in between."""
    assert scaling.low_freq_factor is not None and scaling.high_freq_factor is not None
    assert scaling.original_max_position_embeddings is not None
    old_context = scaling.original_max_position_embeddings
    low_freq_wavelen = old_context / scaling.low_freq_factor
    high_freq_wavelen = old_context / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth = (old_context / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)
