"""Every request body the CPU engine takes, shaped as SGLang 0.5.23 declares it (``srt/managers/io_struct.py``,
``srt/sampling/sampling_params.py``): the same field names, defaults and types, plus miles' ``selector``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

GREEDY_TEMPERATURE = 1e-6  # at or below this, sampling is argmax (as SGLang does)
Selector = Literal["target", "draft", "all"]


class _Strict(BaseModel):
    """Unknown fields are refused: a typo must not silently change sampling."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _Req(_Strict):
    """SGLang's ``BaseReq``: every request may carry ``rid`` and ``http_worker_ipc``."""

    rid: str | None = None
    http_worker_ipc: str | None = None


class SamplingParams(_Strict):
    """``srt/sampling/sampling_params.py`` ``SamplingParams.__init__`` arguments."""

    max_new_tokens: int | None = Field(default=128, ge=0, description="None: up to the context length")
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    stop_regex: str | list[str] | None = None
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=-1, description="-1 (or 0) keeps every token")
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(default=1.0, gt=0.0, le=2.0)
    min_new_tokens: int = Field(default=0, ge=0)
    n: int = Field(default=1, ge=1, le=256)
    beam_width: int | None = None
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    structural_tag: str | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    stream_interval: int | None = None
    logit_bias: dict[str, float] | None = None
    sampling_seed: int | None = None
    custom_params: dict[str, Any] | None = None
    watermark: Any = None

    @field_validator("top_k")
    @classmethod
    def _check_top_k(cls, value: int) -> int:
        if value < -1:
            raise ValueError("top_k must be -1 (all tokens) or positive")
        return value

    @field_validator("stop_regex", "json_schema", "regex", "ebnf", "structural_tag", "beam_width", "watermark")
    @classmethod
    def _unsupported(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("constrained decoding, beam search and watermarks are not supported by the CPU engine")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _token_ids(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key in value or {}:
            if not key.lstrip("-").isdigit():
                raise ValueError(f"logit_bias keys are token ids as strings, got {key!r}")
        return value

    @property
    def is_greedy(self) -> bool:
        return self.temperature <= GREEDY_TEMPERATURE or self.top_k == 1

    @property
    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


# GenerateReqInput fields without an effect here: ignored at the listed values (the router fills several
# in on every request), refused at any other value, so a feature is never silently dropped. ``None`` in place
# of a tuple means "any value is fine".
UNSUPPORTED_GENERATE_FIELDS: dict[str, tuple[Any, ...] | None] = {
    "session_id": (None,),
    "input_embeds": (None,),
    "image_data": (None,),
    "video_data": (None,),
    "audio_data": (None,),
    "mm_hashes": (None,),
    "mm_content_hashes": (None,),
    "use_audio_in_video": (False,),
    "video_config": (None,),
    "watermark": (None,),
    "token_ids_logprob": (None,),
    "return_sampling_mask": (None, False),
    "sampling_logprobs_mode": (None,),
    "return_flat_raw_top_logprobs": (False,),
    "return_flat_raw_output_top_logprobs": (False,),
    "return_flat_raw_top_logprobs_b64": (False,),
    "return_hidden_states": (False, None),
    "return_routed_experts": (False,),
    "routed_experts_start_len": (0,),
    "return_indexer_topk": (False,),
    "modalities": (None,),
    "session_params": (None,),
    "lora_path": (None,),
    "lora_id": (None,),
    "custom_logit_processor": (None,),
    "positional_embed_overrides": (None,),
    "bootstrap_host": (None,),
    "bootstrap_port": (None,),
    "bootstrap_room": (None,),
    "bootstrap_pair_key": (None,),
    "decode_tp_size": (None,),
    "background": (False,),
    "require_reasoning": (False,),
    "max_thinking_tokens": (None,),
    "return_bytes": (False,),
    "return_entropy": (False,),
    "return_prompt_token_ids": (False,),
    "need_wait_for_mm_inputs": (None,),
    "num_items_assigned": (None,),
    "encoder_urls": (None,),
    "max_dynamic_patch": (None,),
    "min_dynamic_patch": (None,),
    "image_max_dynamic_patch": (None,),
    "video_max_dynamic_patch": (None,),
    "images_config": (None,),
    "mm_processor_kwargs": (None,),
    "multi_item_delimiter_indices": (None,),
    "token_indices_to_pool": (None,),
    "cache_salt": (None,),
    "kv_hints": (None,),
    # routing and bookkeeping: any value
    "model": None,
    "log_metrics": None,
    "routed_dp_rank": None,
    "data_parallel_rank": None,
    "disagg_prefill_dp_rank": None,
    "routing_key": None,
    "conversation_id": None,
    "http_worker_ipc": None,
    "priority": None,
    "extra_key": None,
    "no_logs": None,
    "custom_labels": None,
    "external_trace_header": None,
    "received_time": None,
}


class GenerateReqInput(_Strict):
    """``/generate``: one prompt, or a batch when ``text``/``input_ids`` lists prompts."""

    model_config = ConfigDict(extra="allow", frozen=True)  # the fields above are checked, then dropped

    rid: str | list[str] | None = None
    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None
    return_logprob: bool | list[bool] | None = None
    logprob_start_len: int | list[int] | None = None
    top_logprobs_num: int | list[int] | None = None
    return_text_in_logprobs: bool = False
    stream: bool = False


class UpdateWeightsFromTensorReqInput(_Req):
    """``serialized_named_tensors``: one string per TP rank (here one), see actors.weights_wire."""

    serialized_named_tensors: list[str] = Field(min_length=1, max_length=1)
    load_format: str | None = None
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: str | None = None
    selector: Selector = "all"
    torch_empty_cache: bool = False


class UpdateWeightFromDiskReqInput(_Req):
    """``model_path``: a Hugging Face checkpoint directory of the served architecture, or another weights
    directory (formats in ``actors.cpu_engine.weights``)."""

    model_path: str = Field(min_length=1)
    load_format: str | None = None
    abort_all_requests: bool = False
    weight_version: str | None = None
    is_async: bool = False
    torch_empty_cache: bool = False
    keep_pause: bool = False
    recapture_cuda_graph: bool = False
    token_step: int = 0
    flush_cache: bool = True
    manifest: dict[str, Any] | None = None


class InitWeightsUpdateGroupReqInput(_Req):
    """Join a weight-update group hosted by the trainer (rank 0); TP rank ``r`` joins as ``rank_offset + r``."""

    master_address: str = Field(min_length=1)
    master_port: int = Field(gt=0, lt=65536)
    rank_offset: int = Field(ge=1)
    world_size: int = Field(ge=2)
    group_name: str = Field(default="weight_update_group", min_length=1)
    backend: str = "nccl"


class UpdateWeightsFromDistributedReqInput(_Req):
    """Receive ``names[i]`` (``dtypes[i]`` as a torch dtype name, ``shapes[i]``) by broadcast from rank 0."""

    names: list[str] = Field(min_length=1)
    dtypes: list[str]
    shapes: list[list[int]]
    group_name: str = "weight_update_group"
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: str | None = None
    load_format: str | None = None
    selector: Selector = "all"
    torch_empty_cache: bool = False


class DestroyWeightsUpdateGroupReqInput(_Req):
    group_name: str = "weight_update_group"


class BeginWeightUpdateReqInput(_Req):
    selector: Selector = "all"


class EndWeightUpdateReqInput(_Req):
    pass


class UpdateWeightVersionReqInput(_Req):
    new_version: str
    abort_all_requests: bool = True


class GetWeightsByNameReqInput(_Req):
    name: str
    truncate_size: int = Field(default=100, ge=0)


class MemoryOccupationReqInput(_Req):
    """Release/ResumeMemoryOccupationReqInput: which memory; ``None`` or ``[]`` means all of it."""

    tags: list[Literal["weights", "kv_cache", "cuda_graph"]] | None = None


class PauseGenerationReqInput(_Req):
    """SGLang's pause modes; ``retract`` behaves like ``in_place`` (there is no KV memory to give back)."""

    mode: Literal["abort", "retract", "in_place"] = "abort"


class ContinueGenerationReqInput(_Req):
    torch_empty_cache: bool = True


class AbortReq(_Req):
    abort_all: bool = False
    finished_reason: dict[str, Any] | None = None
    abort_message: str | None = None
    weight_versions: Any = None
