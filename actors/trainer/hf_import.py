"""Hugging Face checkpoint -> this rank's Megatron GPTModel parameters, reading only this rank's slices (the inverse
of :mod:`actors.trainer.hf_export`).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from actors.hf.reader import CheckpointError, CheckpointReader
from actors.model_config import ModelConfig
from actors.trainer.hf_layout import direct_placements, fuse_qkv, qkv_suffixes

IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)  # buffers some old checkpoints carry; recomputed from config


def expected_hf_shapes(model: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every HF tensor the model needs, with its full shape (tied models have no ``lm_head.weight``)."""
    h, d, f, v = model.hidden_size, model.head_dim, model.ffn_hidden_size, model.vocab_size
    q_rows, kv_rows = model.num_attention_heads * d, model.num_key_value_heads * d
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    if not model.tie_word_embeddings:
        shapes["lm_head.weight"] = (v, h)
    for i in range(model.num_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q_rows, h),
            p + "self_attn.k_proj.weight": (kv_rows, h),
            p + "self_attn.v_proj.weight": (kv_rows, h),
            p + "self_attn.o_proj.weight": (h, q_rows),
            p + "post_attention_layernorm.weight": (h,),
            p + "mlp.gate_proj.weight": (f, h),
            p + "mlp.up_proj.weight": (f, h),
            p + "mlp.down_proj.weight": (h, f),
        }
        if model.qkv_bias:
            shapes |= {p + "self_attn.q_proj.bias": (q_rows,), p + "self_attn.k_proj.bias": (kv_rows,),
                       p + "self_attn.v_proj.bias": (kv_rows,)}  # fmt: skip
        if model.qk_norm:
            shapes |= {p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,)}
    return shapes


def check_checkpoint(reader: CheckpointReader, model: ModelConfig) -> None:
    """Every needed tensor present with its full shape, and nothing unexpected (headers only)."""
    expected = expected_hf_shapes(model)
    present = set(reader.names())
    missing = sorted(set(expected) - present)
    if missing:
        raise CheckpointError(f"{reader.directory}: tensors missing from the checkpoint: {missing[:5]}")
    allowed_extra = {"lm_head.weight"} if model.tie_word_embeddings else set()
    extra = sorted(n for n in present - set(expected) - allowed_extra if not n.endswith(IGNORED_SUFFIXES))
    if extra:
        raise CheckpointError(
            f"{reader.directory}: tensors this {model.architecture} model has no place for: {extra[:5]} "
            "(is config.json the checkpoint's own?)"
        )
    for name, shape in expected.items():
        if reader.shape(name) != shape:
            raise CheckpointError(
                f"{reader.directory}: {name} has shape {list(reader.shape(name))}, expected {list(shape)}"
            )


def load_hf_weights(
    params: dict[str, Tensor], model: ModelConfig, reader: CheckpointReader, *, tp_rank: int, tp_size: int
) -> None:
    """Copy this rank's slices of the checkpoint into ``params`` (Megatron names), in place, one at a time.

    Every name and full shape is checked (from the safetensors headers) before any data is read; stored dtypes are
    converted to the parameters' dtype.
    """
    check_checkpoint(reader, model)
    covered: set[str] = set()
    with torch.no_grad():
        for name, tensor in _rank_slices(reader, model, tp_rank=tp_rank, tp_size=tp_size):
            param = params.get(name)
            if param is None or tuple(tensor.shape) != tuple(param.shape):
                shape = None if param is None else list(param.shape)
                raise CheckpointError(f"{name}: slice {list(tensor.shape)} does not fit parameter {shape}")
            param.copy_(tensor)
            covered.add(name)
    if covered != set(params):
        raise CheckpointError(f"Megatron parameters not loaded: {sorted(set(params) - covered)[:5]}")


def _rank_slices(
    reader: CheckpointReader, model: ModelConfig, *, tp_rank: int, tp_size: int
) -> Iterator[tuple[str, Tensor]]:
    """(Megatron name, this rank's slice) for every parameter, read lazily: column-parallel tensors by rows,
    row-parallel ones by columns (safetensors slices), q/k/v rows of this rank's query groups read and interleaved
    locally, gate and up rows stacked."""

    def part(name: str, dim: int) -> Tensor:
        return reader.read_part(name, dim=dim, part=tp_rank, parts=tp_size)

    for placement in direct_placements(model):
        yield (
            placement.megatron,
            reader.read(placement.hf) if placement.dim is None else part(placement.hf, placement.dim),
        )
    for i in range(model.num_layers):
        src, dst = f"decoder.layers.{i}", f"model.layers.{i}"
        for suffix in qkv_suffixes(model):
            q, k, v = (part(f"{dst}.self_attn.{proj}.{suffix}", 0) for proj in ("q_proj", "k_proj", "v_proj"))
            yield f"{src}.self_attention.linear_qkv.{suffix}", fuse_qkv(q, k, v, model)
        gate, up = part(f"{dst}.mlp.gate_proj.weight", 0), part(f"{dst}.mlp.up_proj.weight", 0)
        yield f"{src}.mlp.linear_fc1.weight", torch.cat((gate, up), dim=0)
