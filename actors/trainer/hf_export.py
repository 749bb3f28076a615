"""Megatron GPTModel shards -> full Hugging Face llama tensors (``model.layers.{i}.self_attn.q_proj.weight``).

Megatron layouts undone here, per TP shard before gathering:

- ``linear_qkv.weight`` [groups_per_rank * (heads_per_group + 2) * d, hidden] is interleaved per query
  group: ``[q_g0 (heads_per_group * d) | k_g0 (d) | v_g0 (d) | q_g1 | ...]``. TP rank r holds groups
  ``r * groups_per_rank ...``, so q, k and v are split per group, then concatenated over ranks in order.
- ``linear_fc1.weight`` holds ``[gate_shard; up_shard]`` on each TP rank (SwiGLU's ``silu(gate) * up``).
- column-parallel weights (embedding, q/k/v, gate/up, output) are split on dim 0, row-parallel ones
  (``linear_proj`` = o_proj, ``linear_fc2`` = down_proj) on dim 1; norm weights are replicated.
"""

from __future__ import annotations

import torch.distributed as dist
from torch import Tensor

from actors.model_config import ModelConfig
from actors.trainer.distributed import gather_along


def split_qkv(shard: Tensor, model: ModelConfig, tp_size: int) -> tuple[Tensor, Tensor, Tensor]:
    """One TP rank's fused ``linear_qkv`` weight -> its (q, k, v) rows, each in HF head order."""
    groups = model.num_key_value_heads // tp_size
    per_group = model.num_attention_heads // model.num_key_value_heads
    d = model.head_dim
    grouped = shard.reshape(groups, (per_group + 2) * d, shard.shape[-1])
    q = grouped[:, : per_group * d].reshape(-1, shard.shape[-1])
    k = grouped[:, per_group * d : (per_group + 1) * d].reshape(-1, shard.shape[-1])
    v = grouped[:, (per_group + 1) * d :].reshape(-1, shard.shape[-1])
    return q, k, v


def export_hf(
    params: dict[str, Tensor], model: ModelConfig, *, group: dist.ProcessGroup | None, tp_size: int
) -> list[tuple[str, Tensor]]:
    """Full HF llama tensors from this rank's Megatron parameters; a collective over the TP ``group``.

    Every rank of the TP group gets the full tensors (CPU copies). ``lm_head.weight`` is always present;
    with tied embeddings it equals ``model.embed_tokens.weight``.
    """

    def gather(name: str, dim: int) -> Tensor:
        return gather_along(params[name], dim, group, tp_size).cpu()

    embed = gather("embedding.word_embeddings.weight", 0)
    out: list[tuple[str, Tensor]] = [("model.embed_tokens.weight", embed)]
    for i in range(model.num_layers):
        src, dst = f"decoder.layers.{i}", f"model.layers.{i}"
        q, k, v = split_qkv(params[f"{src}.self_attention.linear_qkv.weight"].detach(), model, tp_size)
        gate, up = params[f"{src}.mlp.linear_fc1.weight"].detach().chunk(2, dim=0)
        out += [
            (f"{dst}.input_layernorm.weight", params[f"{src}.input_layernorm.weight"].detach().cpu().clone()),
            (f"{dst}.self_attn.q_proj.weight", gather_along(q, 0, group, tp_size).cpu()),
            (f"{dst}.self_attn.k_proj.weight", gather_along(k, 0, group, tp_size).cpu()),
            (f"{dst}.self_attn.v_proj.weight", gather_along(v, 0, group, tp_size).cpu()),
            (f"{dst}.self_attn.o_proj.weight", gather(f"{src}.self_attention.linear_proj.weight", 1)),
            (
                f"{dst}.post_attention_layernorm.weight",
                params[f"{src}.pre_mlp_layernorm.weight"].detach().cpu().clone(),
            ),
            (f"{dst}.mlp.gate_proj.weight", gather_along(gate, 0, group, tp_size).cpu()),
            (f"{dst}.mlp.up_proj.weight", gather_along(up, 0, group, tp_size).cpu()),
            (f"{dst}.mlp.down_proj.weight", gather(f"{src}.mlp.linear_fc2.weight", 1)),
        ]
    out.append(("model.norm.weight", params["decoder.final_layernorm.weight"].detach().cpu().clone()))
    lm_head = embed.clone() if model.tie_word_embeddings else gather("output_layer.weight", 0)
    out.append(("lm_head.weight", lm_head))
    return out
