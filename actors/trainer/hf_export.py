"""Megatron GPTModel shards -> full Hugging Face tensors (``model.layers.{i}.self_attn.q_proj.weight`` ...)."""

from __future__ import annotations

import torch.distributed as dist
from torch import Tensor

from actors.model_config import ModelConfig
from actors.trainer.distributed import gather_along
from actors.trainer.hf_layout import direct_placements, qkv_suffixes, split_qkv


def export_hf(
    params: dict[str, Tensor], model: ModelConfig, *, group: dist.ProcessGroup | None, tp_size: int
) -> list[tuple[str, Tensor]]:
    """Full HF tensors from this rank's Megatron parameters; a collective over the TP ``group``.

    Every rank of the TP group gets the full tensors (CPU copies). ``lm_head.weight`` is always present (last);
    with tied embeddings it equals ``model.embed_tokens.weight``. Each rank undoes Megatron's layouts
    (:mod:`actors.trainer.hf_layout`) on its own shard, then the TP group gathers: q/k/v are split per query group
    before gathering, gate/up per rank, row-parallel weights gather on dim 1, column-parallel ones on dim 0;
    replicated norms are copied.
    """

    def full(tensor: Tensor, dim: int | None) -> Tensor:
        if dim is None:
            return tensor.detach().cpu().clone()
        return gather_along(tensor.detach(), dim, group, tp_size).cpu()

    direct = {p.hf: full(params[p.megatron], p.dim) for p in direct_placements(model)}
    out: list[tuple[str, Tensor]] = [("model.embed_tokens.weight", direct["model.embed_tokens.weight"])]
    for i in range(model.num_layers):
        src, dst = f"decoder.layers.{i}", f"model.layers.{i}"
        out.append((f"{dst}.input_layernorm.weight", direct[f"{dst}.input_layernorm.weight"]))
        fused = {s: split_qkv(params[f"{src}.self_attention.linear_qkv.{s}"].detach(), model, tp_size)
                 for s in qkv_suffixes(model)}  # fmt: skip
        for index, proj in enumerate(("q_proj", "k_proj", "v_proj")):
            out += [(f"{dst}.self_attn.{proj}.{s}", full(parts[index], 0)) for s, parts in fused.items()]
        for name in ("self_attn.q_norm", "self_attn.k_norm") if model.qk_norm else ():
            out.append((f"{dst}.{name}.weight", direct[f"{dst}.{name}.weight"]))
        gate, up = params[f"{src}.mlp.linear_fc1.weight"].detach().chunk(2, dim=0)
        out += [
            (f"{dst}.self_attn.o_proj.weight", direct[f"{dst}.self_attn.o_proj.weight"]),
            (f"{dst}.post_attention_layernorm.weight", direct[f"{dst}.post_attention_layernorm.weight"]),
            (f"{dst}.mlp.gate_proj.weight", full(gate, 0)),
            (f"{dst}.mlp.up_proj.weight", full(up, 0)),
            (f"{dst}.mlp.down_proj.weight", direct[f"{dst}.mlp.down_proj.weight"]),
        ]
    out.append(("model.norm.weight", direct["model.norm.weight"]))
    lm_head = direct["lm_head.weight"] if "lm_head.weight" in direct else out[0][1].clone()
    out.append(("lm_head.weight", lm_head))
    return out
