"""The CPU engine's OpenAI request models, as SGLang 0.5.23's ``srt/entrypoints/openai/protocol.py`` has them: the
same names and fields, for the routes (:mod:`actors.cpu_engine.openai_api`) and streamed answers (``openai_stream``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator


class StreamOptions(BaseModel):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class _OpenAIRequest(BaseModel):
    """The fields ``CompletionRequest`` and ``ChatCompletionRequest`` share; unknown fields are ignored, as SGLang's."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    model: str = "default"
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    n: int = 1
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    min_tokens: int = 0
    regex: str | None = None
    ebnf: str | None = None
    stop_token_ids: list[int] | None = None
    stop_regex: str | list[str] | None = None
    no_stop_trim: bool = False
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    response_format: dict[str, Any] | None = None
    custom_params: dict[str, Any] | None = None
    watermark: dict[str, Any] | None = None
    return_token_ids: bool = False
    rid: str | list[str] | None = None
    lora_path: str | list[str | None] | None = None
    session_id: str | None = None
    custom_logit_processor: str | list[str | None] | None = None
    return_hidden_states: bool | str = False
    return_routed_experts: bool = False
    extra_key: str | list[str] | None = None
    cache_salt: str | list[str] | None = None
    priority: int | None = None
    routed_dp_rank: int | None = None

    def usage_wanted(self) -> tuple[bool, bool]:
        """``utils.should_include_usage``: (final usage chunk, usage on every chunk)."""
        options = self.stream_options
        return bool(options and options.include_usage), bool(options and options.continuous_usage_stats)


class CompletionRequest(_OpenAIRequest):
    prompt: list[int] | list[list[int]] | str | list[str]
    echo: bool = False
    logprobs: int | None = None
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    json_schema: str | None = None

    @field_validator("max_tokens")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("max_tokens must be positive")
        return value


class ChatCompletionRequest(_OpenAIRequest):
    messages: list[dict[str, Any]]
    input_ids: list[int] | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    return_prompt_token_ids: bool = False
    return_meta_info: bool = False


# The union the handlers take.
OpenAIServingRequest = CompletionRequest | ChatCompletionRequest
