"""How one CPU engine behaves (its ``EngineSettings``), parsed once from the command line by ``__main__``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EngineSettings(BaseModel):
    """How one CPU engine behaves; immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_path: str = Field(description="Reported as the model path; where weights came from.")
    tokenizer_path: str = Field(default="actors.tokenizer (bytes)", description="Reported as the tokenizer path.")
    served_model_name: str = "cpu-engine"
    eos_token_ids: tuple[int, ...] = Field(
        default=(), description="Ids ending a generation besides the tokenizer's eos (SGLang's hf_eos_token_id)."
    )
    weight_version: str = "default"
    random_seed: int = Field(default=0, description="Seeds sampling for requests without a seed.")
    context_length: int = Field(gt=1, description="Prompt plus completion must fit in this.")
    max_batch_size: int = Field(default=64, gt=0)
    batch_window_s: float = Field(default=0.002, ge=0.0)
    pause_wait_timeout_s: float = Field(default=300.0, gt=0.0)
    health_timeout_s: float = Field(default=30.0, gt=0.0)
    weights_group_timeout_s: float = Field(
        default=120.0, gt=0.0, description="Deadline to join a weight-update group and for each broadcast."
    )
    prefix_cache_tokens: int = Field(
        default=1 << 16, ge=0, description="Tokens (prompts and outputs) the prefix cache keeps for reuse; 0: none."
    )
    enable_cache_report: bool = Field(
        default=False, description="SGLang's --enable-cache-report: OpenAI usage has prompt_tokens_details."
    )
    max_total_num_tokens: int = Field(default=1 << 16, gt=0, description="Token budget reported (token_usage).")
