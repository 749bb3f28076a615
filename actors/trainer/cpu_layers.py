"""Megatron-core layers made to run on CPU: attention through torch SDPA, RoPE kept off CUDA (actors.trainer.model
builds the model with them)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from actors.trainer._megatron import DotProductAttention, RotaryEmbedding


# DotProductAttention takes its score buffer from parallel_state.get_global_memory_buffer(), allocated on
# torch.cuda.current_device(): this computes the same (causal, GQA by repeat_interleave) with torch SDPA.
class SdpaCoreAttention(DotProductAttention):
    """Megatron's core attention computed with torch SDPA (no CUDA-only buffer); causal, no mask tensor."""

    def forward(  # type: ignore[override]
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attention_mask: Tensor | None,
        attn_mask_type: object | None = None,
        attention_bias: Tensor | None = None,
        packed_seq_params: object | None = None,
    ) -> Tensor:
        """``query`` [sq, b, heads, d], ``key``/``value`` [sk, b, groups, d] -> context [sq, b, heads * d]."""
        if attention_mask is not None or attention_bias is not None or packed_seq_params is not None:
            raise NotImplementedError("SdpaCoreAttention supports plain causal attention only")
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, heads, s, d]
        repeats = q.shape[1] // k.shape[1]
        if repeats > 1:  # query head h reads key/value group h // repeats, as in Megatron and HF
            k = k.repeat_interleave(repeats, dim=1)
            v = v.repeat_interleave(repeats, dim=1)
        context = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.softmax_scale)
        seq_len, batch = query.shape[0], query.shape[1]
        return context.permute(2, 0, 1, 3).reshape(seq_len, batch, -1)


# RotaryEmbedding.get_emb moves inv_freq to CUDA on first use: this keeps it on the CPU.
class CpuRotaryEmbedding(RotaryEmbedding):
    """Megatron's RoPE (rotate-half layout, the HF convention) without the move of ``inv_freq`` to CUDA."""

    def get_emb(self, max_seq_len: int, offset: int = 0) -> Tensor:
        """[max_seq_len, 1, 1, head_dim] angles, ``cat(freqs, freqs)`` as in HF's ``rotate_half`` RoPE."""
        freqs = self.get_freqs_non_repeated(max_seq_len, offset)
        return torch.cat((freqs, freqs), dim=-1)[:, None, None, :]
