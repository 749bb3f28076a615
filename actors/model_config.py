"""The model architecture shared by the trainer (megatron-core GPTModel) and the CPU engine.

One config on both sides, and weights exchanged under Hugging Face names (``model.layers.0.self_attn.q_proj.weight``
...), so a trainer's export loads straight into the CPU engine and into real SGLang.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Architecture = Literal["llama", "mistral", "qwen2", "qwen3"]


class RopeScaling(BaseModel):
    """RoPE frequency scaling as transformers applies it (``rope_parameters`` of config.json).

    ``linear``: every inverse frequency divided by ``factor``. ``llama3``: Llama 3.1's smooth interpolation
    between ``low_freq_factor`` and ``high_freq_factor`` wavelengths of ``original_max_position_embeddings``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rope_type: Literal["linear", "llama3"]
    factor: float = Field(gt=0)
    low_freq_factor: float | None = Field(default=None, gt=0, description="llama3 only.")
    high_freq_factor: float | None = Field(default=None, gt=0, description="llama3 only.")
    original_max_position_embeddings: int | None = Field(default=None, gt=0, description="llama3 only.")

    @model_validator(mode="after")
    def _check_llama3(self) -> RopeScaling:
        if self.rope_type == "llama3":
            for name in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
                if getattr(self, name) is None:
                    raise ValueError(f"rope_scaling.{name} is required for rope_type 'llama3'")
            assert self.low_freq_factor is not None and self.high_freq_factor is not None
            if self.high_freq_factor <= self.low_freq_factor:
                raise ValueError("rope_scaling.high_freq_factor must be greater than rope_scaling.low_freq_factor")
        return self


class ModelConfig(BaseModel):
    """Architecture of a llama-style decoder (RMSNorm, SwiGLU MLP, rotary position embeddings); immutable.
    ``head_dim`` defaults to hidden_size // heads.

    The defaults are the built-in tiny model (a 260-token byte vocabulary, no biases); :mod:`actors.hf` fills the
    other fields from a Hugging Face ``config.json`` (llama, mistral, qwen2 with q/k/v biases, qwen3 with q/k
    RMSNorm; GQA, tied embeddings, an explicit head_dim, RoPE scaling)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    architecture: Architecture = Field(
        default="llama", description="The Hugging Face model_type the weights and config.json follow."
    )
    vocab_size: int = Field(default=260, gt=0, description="Token ids are in [0, vocab_size).")
    hidden_size: int = Field(default=64, gt=0)
    num_layers: int = Field(default=2, gt=0)
    num_attention_heads: int = Field(default=4, gt=0)
    num_key_value_heads: int = Field(default=4, gt=0)
    head_dim: int = Field(default=0, gt=0, description="Per-head size; default hidden_size // num_attention_heads.")
    ffn_hidden_size: int = Field(default=128, gt=0)
    max_position_embeddings: int = Field(default=256, gt=0)
    rope_theta: float = Field(default=10000.0, gt=0)
    rope_scaling: RopeScaling | None = None
    rms_norm_eps: float = Field(default=1e-5, gt=0)
    tie_word_embeddings: bool = False
    seed: int = Field(default=1234, description="Seed for the initial weights.")

    @model_validator(mode="before")
    @classmethod
    def _default_head_dim(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("head_dim") is None:
            hidden = data.get("hidden_size", cls.model_fields["hidden_size"].default)
            heads = data.get("num_attention_heads", cls.model_fields["num_attention_heads"].default)
            if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
                if hidden % heads:
                    raise ValueError(
                        f"hidden_size={hidden} must be divisible by num_attention_heads={heads} "
                        "(or give head_dim explicitly)"
                    )
                data = {**data, "head_dim": hidden // heads}
        return data

    @model_validator(mode="after")
    def _check_heads(self) -> ModelConfig:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} must be a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even (rotary embeddings rotate pairs)")
        return self

    @property
    def qkv_bias(self) -> bool:
        """Biases on the q/k/v projections (qwen2; o_proj has none)."""
        return self.architecture == "qwen2"

    @property
    def qk_norm(self) -> bool:
        """An RMSNorm over each query and key head before RoPE (qwen3: ``q_norm``, ``k_norm``)."""
        return self.architecture == "qwen3"
