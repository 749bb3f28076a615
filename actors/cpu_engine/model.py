"""A llama-style decoder in plain torch, numerically the same as transformers' ``LlamaForCausalLM``,
``MistralForCausalLM``, ``Qwen2ForCausalLM`` and ``Qwen3ForCausalLM`` (``models/*/modeling_*.py``), with HF parameter
names (``model.layers.0.self_attn.q_proj.weight`` ...) so a trainer's export or an HF checkpoint loads by name.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from actors.hf.rope import rope_inv_freq
from actors.model_config import ModelConfig

INIT_STD = 0.02  # HF llama's default initializer_range


class RMSNorm(nn.Module):
    """HF ``LlamaRMSNorm``: normalise in float32, scale by ``weight`` in the input dtype."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        input_dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(input_dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """HF's rotate_half: ``[x1, x2] -> [-x2, x1]`` over the last dim's two halves."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``[B, T, head_dim]`` for integer ``positions`` ``[B, T]``, computed in float32 as HF does."""
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


@dataclass
class KVCache:
    """Preallocated keys/values per layer, ``[B, n_kv_heads, capacity, head_dim]``, filled left to right."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    length: int = 0

    @classmethod
    def allocate(cls, config: ModelConfig, batch: int, capacity: int, dtype: torch.dtype) -> KVCache:
        shape = (batch, config.num_key_value_heads, capacity, config.head_dim)
        return cls(
            keys=[torch.zeros(shape, dtype=dtype) for _ in range(config.num_layers)],
            values=[torch.zeros(shape, dtype=dtype) for _ in range(config.num_layers)],
        )


class LlamaAttention(nn.Module):
    """Multi-head attention with GQA and rotary embeddings; q/k/v biases (qwen2) and q/k norms (qwen3)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        bias = config.qkv_bias
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps) if config.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps) if config.qk_norm else None

    def forward(
        self,
        hidden: torch.Tensor,
        cos_sin: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor,
        layer: int,
        cache: KVCache | None,
    ) -> torch.Tensor:
        batch, steps, _ = hidden.shape
        q = self.q_proj(hidden).view(batch, steps, self.num_heads, self.head_dim)
        k = self.k_proj(hidden).view(batch, steps, self.num_kv_heads, self.head_dim)
        v = self.v_proj(hidden).view(batch, steps, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if self.q_norm is not None and self.k_norm is not None:  # qwen3: per head, before RoPE
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        cos, sin = cos_sin[0].unsqueeze(1), cos_sin[1].unsqueeze(1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            start, end = cache.length, cache.length + steps
            cache.keys[layer][:, :, start:end] = k
            cache.values[layer][:, :, start:end] = v
            k, v = cache.keys[layer][:, :, :end], cache.values[layer][:, :, :end]
        n_rep = self.num_heads // self.num_kv_heads
        if n_rep > 1:  # HF repeat_kv: each kv head serves n_rep consecutive query heads
            k = k.repeat_interleave(n_rep, dim=1)
            v = v.repeat_interleave(n_rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.head_dim**-0.5)
        return self.o_proj(out.transpose(1, 2).reshape(batch, steps, -1))


class LlamaMLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.ffn_hidden_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.ffn_hidden_size, bias=False)
        self.down_proj = nn.Linear(config.ffn_hidden_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    """Pre-norm block: ``h + attn(norm(h))`` then ``h + mlp(norm(h))``."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(config)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self,
        hidden: torch.Tensor,
        cos_sin: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor,
        layer: int,
        cache: KVCache | None,
    ) -> torch.Tensor:
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), cos_sin, mask, layer, cache)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class LlamaModel(nn.Module):
    """Embeddings, decoder layers and the final norm (HF's ``model.`` prefix)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    """The decoder plus ``lm_head``; ``forward`` returns float logits ``[B, T, vocab]``.

    What the :class:`ModelConfig` says is what runs: GQA (``repeat_kv``), an explicit ``head_dim``, q/k/v biases
    (qwen2), an RMSNorm over each query and key head before RoPE (qwen3), tied embeddings, ``rope_theta`` and RoPE
    scaling (the frequencies of :func:`actors.hf.rope_inv_freq`, as transformers' ``ROPE_INIT_FUNCTIONS``).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.register_buffer("inv_freq", rope_inv_freq(config), persistent=False)

    def forward(
        self,
        input_ids: torch.Tensor,
        *,
        positions: torch.Tensor | None = None,
        key_valid: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """Logits for ``input_ids`` ``[B, T]``.

        Without a cache this is a plain causal forward over whole sequences. With ``cache``, the new
        tokens are appended after ``cache.length`` and ``key_valid`` ``[B, cache.length + T]`` marks
        which cached/new slots are real tokens (false for left padding).
        """
        batch, steps = input_ids.shape
        past = cache.length if cache is not None else 0
        if positions is None:
            positions = torch.arange(past, past + steps).expand(batch, steps)
        if key_valid is None:
            key_valid = torch.ones(batch, past + steps, dtype=torch.bool)
        mask = _attention_mask(key_valid, past, steps)
        hidden = self.model.embed_tokens(input_ids)
        cos_sin = rope_cos_sin(positions, self.inv_freq, hidden.dtype)
        for index, layer in enumerate(self.model.layers):
            hidden = layer(hidden, cos_sin, mask, index, cache)
        if cache is not None:
            cache.length += steps
        return self.lm_head(self.model.norm(hidden)).float()


def _attention_mask(key_valid: torch.Tensor, past: int, steps: int) -> torch.Tensor:
    """Boolean mask ``[B, 1, T, past + T]``: causal and valid keys; a query may always see itself.

    Letting padding queries see themselves keeps their rows finite (an all-false row gives NaN,
    which would leak into the cache through ``0 * NaN``).
    """
    total = past + steps
    query_pos = torch.arange(past, total)[:, None]
    key_pos = torch.arange(total)[None, :]
    causal = key_pos <= query_pos
    mask = causal[None] & key_valid[:, None, :]
    mask |= (key_pos == query_pos)[None]
    return mask[:, None]


def build_model(config: ModelConfig) -> LlamaForCausalLM:
    """A model with deterministic random weights drawn from ``config.seed`` (normal(0, 0.02), norms 1)."""
    model = LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(config.seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.normal_(0.0, INIT_STD, generator=generator)
    return model.eval()


def empty_model(config: ModelConfig, dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    """A model to be loaded into (parameters in ``dtype``); its placeholder init leaves the global RNG as it was."""
    with torch.random.fork_rng(devices=[]):
        return cast_parameters(LlamaForCausalLM(config).eval(), dtype)


def cast_parameters(model: LlamaForCausalLM, dtype: torch.dtype) -> LlamaForCausalLM:
    """``model`` with its parameters in ``dtype``; the RoPE frequencies stay float32 (HF computes RoPE in float32)."""
    for param in model.parameters():
        param.data = param.data.to(dtype)
    return model


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """HF names and shapes of every parameter the model owns (``lm_head`` absent when tied)."""
    hidden, ffn, vocab = config.hidden_size, config.ffn_hidden_size, config.vocab_size
    q_out = config.num_attention_heads * config.head_dim
    kv_out = config.num_key_value_heads * config.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for index in range(config.num_layers):
        prefix = f"model.layers.{index}."
        shapes[prefix + "self_attn.q_proj.weight"] = (q_out, hidden)
        shapes[prefix + "self_attn.k_proj.weight"] = (kv_out, hidden)
        shapes[prefix + "self_attn.v_proj.weight"] = (kv_out, hidden)
        shapes[prefix + "self_attn.o_proj.weight"] = (hidden, q_out)
        if config.qkv_bias:
            shapes[prefix + "self_attn.q_proj.bias"] = (q_out,)
            shapes[prefix + "self_attn.k_proj.bias"] = (kv_out,)
            shapes[prefix + "self_attn.v_proj.bias"] = (kv_out,)
        if config.qk_norm:
            shapes[prefix + "self_attn.q_norm.weight"] = (config.head_dim,)
            shapes[prefix + "self_attn.k_norm.weight"] = (config.head_dim,)
        shapes[prefix + "mlp.gate_proj.weight"] = (ffn, hidden)
        shapes[prefix + "mlp.up_proj.weight"] = (ffn, hidden)
        shapes[prefix + "mlp.down_proj.weight"] = (hidden, ffn)
        shapes[prefix + "input_layernorm.weight"] = (hidden,)
        shapes[prefix + "post_attention_layernorm.weight"] = (hidden,)
    shapes["model.norm.weight"] = (hidden,)
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (vocab, hidden)
    return shapes
