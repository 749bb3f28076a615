"""Where each Hugging Face tensor lives in megatron-core's GPTModel, and how tensor parallelism splits it."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from actors.model_config import ModelConfig

# Column-parallel weights (embedding, q/k/v, gate/up, output) split on dim 0, row-parallel ones (o_proj, down_proj)
# on dim 1; norms (layer norms, qwen3's per-head q/k norms) are replicated.
REPLICATED = None
COLUMN = 0  # split along the output rows
ROW = 1  # split along the input columns


@dataclass(frozen=True)
class Placement:
    """One Megatron parameter that is one HF tensor, split along ``dim`` (None: replicated)."""

    megatron: str
    hf: str
    dim: int | None


def direct_placements(model: ModelConfig) -> list[Placement]:
    """Every parameter mapped one to one (all but the fused q/k/v and gate/up), in HF export order.

    The fused ones: ``linear_fc1`` holds ``[gate_shard; up_shard]`` on each TP rank (SwiGLU's ``silu(gate) * up``);
    ``linear_qkv`` see :func:`split_qkv`.
    """
    out = [Placement("embedding.word_embeddings.weight", "model.embed_tokens.weight", COLUMN)]
    for i in range(model.num_layers):
        src, dst = f"decoder.layers.{i}", f"model.layers.{i}"
        out.append(Placement(f"{src}.input_layernorm.weight", f"{dst}.input_layernorm.weight", REPLICATED))
        if model.qk_norm:
            out.append(Placement(f"{src}.self_attention.q_layernorm.weight", f"{dst}.self_attn.q_norm.weight", None))
            out.append(Placement(f"{src}.self_attention.k_layernorm.weight", f"{dst}.self_attn.k_norm.weight", None))
        out += [
            Placement(f"{src}.self_attention.linear_proj.weight", f"{dst}.self_attn.o_proj.weight", ROW),
            Placement(f"{src}.pre_mlp_layernorm.weight", f"{dst}.post_attention_layernorm.weight", REPLICATED),
            Placement(f"{src}.mlp.linear_fc2.weight", f"{dst}.mlp.down_proj.weight", ROW),
        ]
    out.append(Placement("decoder.final_layernorm.weight", "model.norm.weight", REPLICATED))
    if not model.tie_word_embeddings:
        out.append(Placement("output_layer.weight", "lm_head.weight", COLUMN))
    return out


def qkv_suffixes(model: ModelConfig) -> list[str]:
    """``weight``, and ``bias`` for models with q/k/v biases."""
    return ["weight", "bias"] if model.qkv_bias else ["weight"]


def split_qkv(shard: Tensor, model: ModelConfig, tp_size: int) -> tuple[Tensor, Tensor, Tensor]:
    """One TP rank's fused ``linear_qkv`` weight or bias -> its (q, k, v) rows, each in HF head order.

    ``linear_qkv`` (weight [groups * (heads_per_group + 2) * d, hidden], and its bias with qwen2) interleaves per
    query group: ``[q_g0 (heads_per_group * d) | k_g0 (d) | v_g0 (d) | q_g1 | ...]``; TP rank r holds groups
    ``r * groups_per_rank ...``.
    """
    groups = model.num_key_value_heads // tp_size
    per_group = model.num_attention_heads // model.num_key_value_heads
    d = model.head_dim
    rest = shard.shape[1:]
    grouped = shard.reshape(groups, (per_group + 2) * d, *rest)
    q = grouped[:, : per_group * d].reshape(-1, *rest)
    k = grouped[:, per_group * d : (per_group + 1) * d].reshape(-1, *rest)
    v = grouped[:, (per_group + 1) * d :].reshape(-1, *rest)
    return q, k, v


def fuse_qkv(q: Tensor, k: Tensor, v: Tensor, model: ModelConfig) -> Tensor:
    """The inverse of :func:`split_qkv`: one TP rank's q, k, v rows -> its interleaved ``linear_qkv`` rows."""
    d = model.head_dim
    per_group = model.num_attention_heads // model.num_key_value_heads
    groups = k.shape[0] // d
    rest = q.shape[1:]
    parts = (q.reshape(groups, per_group * d, *rest), k.reshape(groups, d, *rest), v.reshape(groups, d, *rest))
    return torch.cat(parts, dim=1).reshape(-1, *rest)
