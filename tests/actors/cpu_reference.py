"""A deliberately plain reference for the CPU engine's model (per position, per head, float64), and greedy
generation with the engine's own batch loop, shared by the model tests and the weight-update tests."""

from __future__ import annotations

import math
import threading
from typing import Any

import torch

from actors.cpu_engine.generation import Sequence, run_batch
from actors.cpu_engine.protocol import GenerationItem, SamplingParams
from actors.model_config import ModelConfig

GQA = ModelConfig(num_key_value_heads=2, seed=7)


def reference_logits(state: dict[str, torch.Tensor], config: ModelConfig, ids: list[int]) -> torch.Tensor:
    """HF llama written out longhand (no cache, no batching), in float64."""
    sd = {name: tensor.double() for name, tensor in state.items()}
    dim, heads, kv_heads = config.head_dim, config.num_attention_heads, config.num_key_value_heads

    def rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return weight * x / torch.sqrt((x * x).mean(-1, keepdim=True) + config.rms_norm_eps)

    half = dim // 2
    inverse_frequencies = torch.tensor([config.rope_theta ** (-2 * i / dim) for i in range(half)], dtype=torch.float64)

    def rope(vec: torch.Tensor, pos: int) -> torch.Tensor:
        """Rotate each pair (i, i + dim/2) of ``vec`` by the angle ``pos * theta^(-2i/dim)``."""
        angle = pos * inverse_frequencies
        a, b = vec[:half], vec[half:]
        return torch.cat([a * torch.cos(angle) - b * torch.sin(angle), b * torch.cos(angle) + a * torch.sin(angle)])

    x = sd["model.embed_tokens.weight"][ids]
    for layer in range(config.num_layers):
        p = f"model.layers.{layer}."
        h = rms(x, sd[p + "input_layernorm.weight"])
        q = (h @ sd[p + "self_attn.q_proj.weight"].T).view(len(ids), heads, dim)
        k = (h @ sd[p + "self_attn.k_proj.weight"].T).view(len(ids), kv_heads, dim)
        v = (h @ sd[p + "self_attn.v_proj.weight"].T).view(len(ids), kv_heads, dim)
        out = torch.zeros(len(ids), heads, dim, dtype=torch.float64)
        keys = [[rope(k[s, kv], s) for kv in range(kv_heads)] for s in range(len(ids))]  # each key rotated once
        for head in range(heads):
            kv = head // (heads // kv_heads)
            for t in range(len(ids)):
                qt = rope(q[t, head], t)
                scores = torch.stack([qt @ keys[s][kv] for s in range(t + 1)]) / math.sqrt(dim)
                out[t, head] = torch.softmax(scores, 0) @ v[: t + 1, kv]
        x = x + out.reshape(len(ids), -1) @ sd[p + "self_attn.o_proj.weight"].T
        h = rms(x, sd[p + "post_attention_layernorm.weight"])
        gate = torch.nn.functional.silu(h @ sd[p + "mlp.gate_proj.weight"].T)
        x = x + (gate * (h @ sd[p + "mlp.up_proj.weight"].T)) @ sd[p + "mlp.down_proj.weight"].T
    head_weight = sd["model.embed_tokens.weight"] if config.tie_word_embeddings else sd["lm_head.weight"]
    return rms(x, sd["model.norm.weight"]) @ head_weight.T


def reference_greedy(state: dict[str, torch.Tensor], config: ModelConfig, ids: list[int], n: int) -> list[int]:
    out: list[int] = []
    for _ in range(n):
        out.append(int(reference_logits(state, config, ids + out)[-1].argmax()))
    return out


def greedy_batch(model: torch.nn.Module, prompts: list[list[int]], n: int, **params: Any) -> list[Sequence]:
    sp = SamplingParams(max_new_tokens=n, ignore_eos=True, **({"temperature": 0.0} | params))
    seqs = [
        Sequence(
            item=GenerationItem(rid=str(i), input_ids=p, params=sp, return_logprob=True, logprob_text=False),
            generator=torch.Generator().manual_seed(sp.sampling_seed or 0),
            max_new_tokens=n,
        )
        for i, p in enumerate(prompts)
    ]
    run_batch(model, seqs, model_lock=threading.Lock(), before_step=lambda live: None)  # type: ignore[arg-type]
    return seqs
