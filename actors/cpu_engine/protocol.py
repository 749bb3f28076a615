"""Request bodies of the SGLang HTTP API as the CPU engine accepts them, and how errors are worded.

Fields follow SGLang's ``GenerateReqInput`` / ``SamplingParams`` / update requests. Unknown fields are
refused (a typo must not silently change sampling); SGLang fields whose effect the CPU engine does not
implement are accepted only at their neutral value.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from actors import tokenizer

GREEDY_TEMPERATURE = 1e-6  # at or below this, sampling is argmax (as SGLang does)
_UNION_TAG = re.compile(r"^(list\[.*\]|dict\[.*\]|str|int|float|bool|none|[A-Z]\w*)$")


class RequestError(Exception):
    """A request the engine refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def format_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """One line naming the offending field(s), deepest first, without pydantic's union-member tags."""
    parts: list[str] = []
    for error in sorted(exc.errors(), key=lambda e: -len(e["loc"])):
        loc = [str(p) for p in error["loc"] if not (isinstance(p, str) and _UNION_TAG.match(p))]
        where = ".".join([prefix, *loc] if prefix else loc) or "body"
        part = f"{where}: {error['msg']}"
        if part not in parts:
            parts.append(part)
    return "invalid request: " + "; ".join(parts[:3])


def parse(model: type[BaseModel], body: Any, prefix: str = "") -> Any:
    """``model`` validated from ``body``; raises :class:`RequestError` naming the bad field."""
    if not isinstance(body, dict):
        raise RequestError(f"{prefix or 'body'} must be a JSON object, got {type(body).__name__}")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise RequestError(format_validation_error(exc, prefix)) from exc


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SamplingParams(_Strict):
    """SGLang sampling parameters; ``seed`` (or SGLang's ``sampling_seed``) makes sampling reproducible."""

    max_new_tokens: int | None = Field(default=128, ge=0, description="None: up to the context length")
    min_new_tokens: int = Field(default=0, ge=0)
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=-1, description="-1 (or 0) keeps every token")
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    seed: int | None = None
    sampling_seed: int | None = None
    n: int = 1
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0

    @field_validator("top_k")
    @classmethod
    def _check_top_k(cls, value: int) -> int:
        if value < -1:
            raise ValueError("top_k must be -1 (all tokens) or positive")
        return value

    @field_validator("n")
    @classmethod
    def _only_one(cls, value: int) -> int:
        if value != 1:
            raise ValueError("the CPU engine supports n=1 only; send the prompt several times instead")
        return value

    @field_validator("frequency_penalty", "presence_penalty")
    @classmethod
    def _no_penalty(cls, value: float) -> float:
        if value != 0.0:
            raise ValueError("penalties are not supported by the CPU engine (only 0.0)")
        return value

    @field_validator("repetition_penalty")
    @classmethod
    def _no_repetition_penalty(cls, value: float) -> float:
        if value != 1.0:
            raise ValueError("repetition_penalty is not supported by the CPU engine (only 1.0)")
        return value

    @property
    def is_greedy(self) -> bool:
        return self.temperature <= GREEDY_TEMPERATURE or self.top_k == 1

    @property
    def effective_seed(self) -> int | None:
        return self.seed if self.seed is not None else self.sampling_seed

    @property
    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


_ANY = object()
# SGLang /generate fields with no effect here: ignored at the listed values (the router fills several in
# on every request), refused at any other value, so a feature is never silently dropped.
_IGNORED_GENERATE_FIELDS: dict[str, Any] = {
    "model": _ANY,
    "log_metrics": _ANY,
    "no_logs": _ANY,
    "custom_labels": _ANY,
    "priority": _ANY,
    "extra_key": _ANY,
    "data_parallel_rank": _ANY,
    "conversation_id": _ANY,
    "return_hidden_states": (False, None),
    "return_routed_experts": (False, None),
    "background": (False, None),
    "return_bytes": (False, None),
    "return_entropy": (False, None),
    "image_data": (None,),
    "video_data": (None,),
    "audio_data": (None,),
    "input_embeds": (None,),
    "lora_path": (None,),
    "lora_id": (None,),
    "session_params": (None,),
    "custom_logit_processor": (None,),
    "token_ids_logprob": (None,),
    "bootstrap_host": (None,),
    "bootstrap_port": (None,),
    "bootstrap_room": (None,),
    "modalities": (None,),
}


def _drop_ignored_fields(body: dict[str, Any]) -> dict[str, Any]:
    kept = dict(body)
    for name, neutral in _IGNORED_GENERATE_FIELDS.items():
        if name not in kept:
            continue
        value = kept.pop(name)
        if neutral is not _ANY and not any(value is n or value == n for n in neutral):
            raise RequestError(f"{name}={json.dumps(value)[:60]} is not supported by the CPU engine")
    return kept


class GenerateRequest(_Strict):
    """SGLang's ``/generate`` body: one prompt, or a batch when ``text``/``input_ids`` lists prompts."""

    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None
    return_logprob: bool | list[bool] = False
    logprob_start_len: int | list[int] = -1
    top_logprobs_num: int = Field(default=0, ge=0, le=0, description="top logprobs are not supported")
    return_text_in_logprobs: bool = False
    rid: str | list[str] | None = None
    stream: bool = False

    @field_validator("stream")
    @classmethod
    def _no_stream(cls, value: bool) -> bool:
        if value:
            raise ValueError("streaming is not supported by the CPU engine; send stream=false")
        return value


@dataclass
class GenerationItem:
    """One prompt to complete, resolved from a (possibly batched) request."""

    rid: str
    input_ids: list[int]
    params: SamplingParams
    return_logprob: bool
    logprob_text: bool


def expand_generate_request(body: Any, *, vocab_size: int, context_length: int) -> tuple[list[GenerationItem], bool]:
    """The items of a ``/generate`` body and whether it was batched; raises :class:`RequestError`."""
    if isinstance(body, dict):
        body = _drop_ignored_fields(body)
    request: GenerateRequest = parse(GenerateRequest, body)
    if (request.text is None) == (request.input_ids is None):
        raise RequestError("exactly one of 'text' or 'input_ids' is required")
    if request.text is not None:
        batched = isinstance(request.text, list)
        texts = request.text if isinstance(request.text, list) else [request.text]
        prompts = [tokenizer.encode(t) for t in texts]
        field = "text"
    else:
        ids = request.input_ids or []
        batched = bool(ids) and isinstance(ids[0], list)
        prompts = [list(p) for p in ids] if batched else [list(ids)]  # type: ignore[arg-type]
        field = "input_ids"
    if not prompts:
        raise RequestError(f"'{field}' is an empty batch")
    size = len(prompts)
    listed = isinstance(request.sampling_params, list)
    params = [
        parse(SamplingParams, p, f"sampling_params[{i}]" if listed else "sampling_params")
        for i, p in enumerate(_per_item(request.sampling_params, size, "sampling_params", default={}))
    ]
    logprob = _per_item(request.return_logprob, size, "return_logprob", default=False)
    rids = _per_item(request.rid, size, "rid", default=None)
    items = []
    for i, prompt in enumerate(prompts):
        where = f"{field}[{i}]" if batched else field
        _check_prompt(prompt, where, vocab_size, context_length)
        items.append(
            GenerationItem(
                rid=rids[i] or uuid.uuid4().hex,
                input_ids=prompt,
                params=params[i],
                return_logprob=bool(logprob[i]),
                logprob_text=request.return_text_in_logprobs,
            )
        )
    if len({item.rid for item in items}) != len(items):
        raise RequestError("'rid' values must be unique within a batch")
    return items, batched


def _per_item(value: Any, size: int, field: str, *, default: Any) -> list[Any]:
    if value is None:
        return [default] * size
    if isinstance(value, list):
        if len(value) != size:
            raise RequestError(f"'{field}' has {len(value)} entries but the batch has {size} prompts")
        return value
    return [value] * size


def _check_prompt(prompt: list[int], where: str, vocab_size: int, context_length: int) -> None:
    if not prompt:
        raise RequestError(f"'{where}' is empty: a prompt needs at least one token")
    if len(prompt) >= context_length:
        raise RequestError(
            f"'{where}' has {len(prompt)} tokens; the context length is {context_length}, so the prompt must be shorter"
        )
    for index, token in enumerate(prompt):
        if not 0 <= token < vocab_size:
            raise RequestError(f"'{where}[{index}]' = {token} is outside the vocabulary [0, {vocab_size})")


class UpdateWeightsFromTensorRequest(_Strict):
    """``serialized_named_tensors``: one string per TP rank (here one), see actors.weights_wire."""

    serialized_named_tensors: list[str] = Field(min_length=1, max_length=1)
    load_format: None = None
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: str | None = None


class UpdateWeightsFromDiskRequest(_Strict):
    """``model_path``: a directory of weights (formats in ``actors.cpu_engine.weights``)."""

    model_path: str = Field(min_length=1)
    load_format: str | None = None
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: str | None = None


class InitWeightsUpdateGroupRequest(_Strict):
    """Join a weight-update group hosted by the trainer (rank 0); this engine is rank ``rank_offset``."""

    master_address: str = Field(min_length=1)
    master_port: int = Field(gt=0, lt=65536)
    rank_offset: int = Field(ge=1)
    world_size: int = Field(ge=2)
    group_name: str = Field(default="weight_update_group", min_length=1)
    backend: Literal["gloo", "nccl"] = "gloo"


class UpdateWeightsFromDistributedRequest(_Strict):
    """Receive ``names[i]`` (``dtypes[i]`` as a torch dtype name, ``shapes[i]``) by broadcast from rank 0."""

    names: list[str] = Field(min_length=1)
    dtypes: list[str]
    shapes: list[list[int]]
    group_name: str = "weight_update_group"
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: str | None = None
    load_format: None = None


class DestroyWeightsUpdateGroupRequest(_Strict):
    group_name: str = "weight_update_group"


class MemoryOccupationRequest(_Strict):
    """Which memory to release/resume; ``None`` means all of it."""

    tags: list[Literal["weights", "kv_cache", "cuda_graph"]] | None = None


class PauseGenerationRequest(_Strict):
    """SGLang's pause modes; ``retract`` behaves like ``in_place`` (there is no KV memory to give back)."""

    mode: Literal["abort", "retract", "in_place"] = "abort"


class AbortRequest(_Strict):
    rid: str = ""
    abort_all: bool = False
