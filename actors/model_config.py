"""The model architecture shared by the trainer (megatron-core GPTModel) and the CPU engine.

A llama-style decoder: RMSNorm, SwiGLU MLP, rotary position embeddings, no biases. Weights are exchanged
under Hugging Face llama names (``model.layers.0.self_attn.q_proj.weight`` ...), so a trainer's export loads
straight into the CPU engine and into real SGLang.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ModelConfig(BaseModel):
    """Architecture of a llama-style decoder; immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    vocab_size: int = Field(default=260, gt=0, description="Token ids are in [0, vocab_size).")
    hidden_size: int = Field(default=64, gt=0)
    num_layers: int = Field(default=2, gt=0)
    num_attention_heads: int = Field(default=4, gt=0)
    num_key_value_heads: int = Field(default=4, gt=0)
    ffn_hidden_size: int = Field(default=128, gt=0)
    max_position_embeddings: int = Field(default=256, gt=0)
    rope_theta: float = Field(default=10000.0, gt=0)
    rms_norm_eps: float = Field(default=1e-5, gt=0)
    tie_word_embeddings: bool = False
    seed: int = Field(default=1234, description="Seed for the initial weights.")

    @model_validator(mode="after")
    def _check_heads(self) -> ModelConfig:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} must be divisible by num_attention_heads="
                f"{self.num_attention_heads}"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} must be a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        return self

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads
