"""Turning a ``/generate`` body (shapes in :mod:`actors.cpu_engine.io_struct`) into the prompts to complete, with
SGLang's checks and error wording.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from actors.cpu_engine.io_struct import UNSUPPORTED_GENERATE_FIELDS, GenerateReqInput, SamplingParams
from actors.tokenizer import BYTE_TOKENIZER, Tokenizer

_UNION_TAG = re.compile(r"^(list\[.*\]|dict\[.*\]|str|int|float|bool|none|[A-Z]\w*)$")
MAX_TOP_LOGPROBS = 64


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


@dataclass
class GenerationItem:
    """One completion to produce, resolved from a (possibly batched, possibly n > 1) request."""

    rid: str
    input_ids: list[int]
    params: SamplingParams
    return_logprob: bool
    logprob_text: bool
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    parallel_sample: bool = False  # one of n > 1 samples of its prompt

    @property
    def input_logprob_start(self) -> int:
        """First prompt position with an input logprob; ``len(input_ids)`` for none (SGLang's -1)."""
        if not self.return_logprob or self.logprob_start_len < 0:
            return len(self.input_ids)
        return self.logprob_start_len


@dataclass
class GenerateBatch:
    """The items of one ``/generate`` call and how to shape the answer."""

    items: list[GenerationItem]
    batched: bool
    stream: bool


def expand_generate_request(
    body: Any, *, vocab_size: int, context_length: int, tokenizer: Tokenizer = BYTE_TOKENIZER
) -> GenerateBatch:
    """The items of a ``/generate`` body (prompt-major, ``n`` per prompt); raises :class:`RequestError`.

    A batched or ``n > 1`` request is normalised the way SGLang's ``GenerateReqInput.normalize_batch_and_arguments``
    and ``TokenizerManager._validate_one_request`` do (``srt/managers/io_struct.py``, ``tokenizer_manager.py``).
    """
    if isinstance(body, dict):
        _check_unsupported(body)
    request: GenerateReqInput = parse(GenerateReqInput, body)
    if (request.text is None) == (request.input_ids is None):
        raise RequestError("exactly one of 'text' or 'input_ids' is required")
    prompts, batched, field = _prompts(request, tokenizer)
    size = len(prompts)
    listed = isinstance(request.sampling_params, list)
    params = [
        parse(SamplingParams, p, f"sampling_params[{i}]" if listed else "sampling_params")
        for i, p in enumerate(_per_item(request.sampling_params, size, "sampling_params", default={}))
    ]
    n = params[0].n
    if any(p.n != n for p in params):
        raise RequestError("sampling_params.n: the parallel_sample_num should be the same for all samples")
    logprob = _per_item(request.return_logprob, size, "return_logprob", default=False)
    starts = _per_item(request.logprob_start_len, size, "logprob_start_len", default=-1)
    tops = _per_item(request.top_logprobs_num, size, "top_logprobs_num", default=0)
    rids = _per_item(request.rid, size, "rid", default=None)
    items: list[GenerationItem] = []
    for i, prompt in enumerate(prompts):
        where = f"{field}[{i}]" if batched else field
        _check_prompt(prompt, where, vocab_size, context_length, params[i])
        _check_logprob_args(where, prompt, starts[i], tops[i], vocab_size)
        for _ in range(n):
            rid = rids[i] if n == 1 and rids[i] else None
            items.append(
                GenerationItem(
                    rid=rid or uuid.uuid4().hex,
                    input_ids=prompt,
                    params=params[i],
                    return_logprob=bool(logprob[i]),
                    logprob_text=request.return_text_in_logprobs,
                    logprob_start_len=int(starts[i] if starts[i] is not None else -1),
                    top_logprobs_num=int(tops[i] or 0),
                    parallel_sample=n > 1,
                )
            )
    if len({item.rid for item in items}) != len(items):
        raise RequestError("'rid' values must be unique within a batch")
    return GenerateBatch(items, batched=batched or n > 1, stream=request.stream)


def _check_unsupported(body: dict[str, Any]) -> None:
    for name, neutral in UNSUPPORTED_GENERATE_FIELDS.items():
        if neutral is None or name not in body:
            continue
        value = body[name]
        if not any(value is v or value == v for v in neutral):
            raise RequestError(f"{name}={json.dumps(value)[:60]} is not supported by the CPU engine")
    unknown = sorted(set(body) - set(GenerateReqInput.model_fields) - set(UNSUPPORTED_GENERATE_FIELDS))
    if unknown:
        raise RequestError(f"{unknown[0]}: not a field of SGLang's GenerateReqInput")


def _prompts(request: GenerateReqInput, tokenizer: Tokenizer) -> tuple[list[list[int]], bool, str]:
    if request.text is not None:
        texts = request.text if isinstance(request.text, list) else [request.text]
        prompts, batched, field = [tokenizer.encode(t) for t in texts], isinstance(request.text, list), "text"
    else:
        ids = request.input_ids or []
        batched = bool(ids) and isinstance(ids[0], list)
        prompts = [list(p) for p in ids] if batched else [list(ids)]  # type: ignore[arg-type]
        field = "input_ids"
    if not prompts:
        raise RequestError(f"'{field}' is an empty batch")
    return prompts, batched, field


def _per_item(value: Any, size: int, field: str, *, default: Any) -> list[Any]:
    if value is None:
        return [default] * size
    if isinstance(value, list):
        if len(value) != size:
            raise RequestError(f"'{field}' has {len(value)} entries but the batch has {size} prompts")
        return [default if v is None else v for v in value]
    return [value] * size


def _check_prompt(prompt: list[int], where: str, vocab_size: int, context_length: int, params: SamplingParams) -> None:
    if not prompt:
        raise RequestError(f"'{where}' is empty: a prompt needs at least one token")
    for index, token in enumerate(prompt):
        if not 0 <= token < vocab_size:
            raise RequestError(f"'{where}[{index}]' = {token} is outside the vocabulary [0, {vocab_size})")
    if len(prompt) >= context_length:
        raise RequestError(
            f"The input ({len(prompt)} tokens) is longer than the model's context length ({context_length} tokens)."
        )
    wanted = params.max_new_tokens
    if wanted is not None and wanted + len(prompt) > context_length:
        raise RequestError(
            f"Requested token count exceeds the model's maximum context length of {context_length} tokens. "
            f"You requested a total of {wanted + len(prompt)} tokens: {len(prompt)} tokens from the input "
            f"messages and {wanted} tokens for the completion. Please reduce the number of tokens in the input "
            "messages or the completion to fit within the limit."
        )
    for key in params.logit_bias or {}:
        if not 0 <= int(key) < vocab_size:
            raise RequestError(f"sampling_params.logit_bias: token id {key} is outside [0, {vocab_size})")


def _check_logprob_args(where: str, prompt: list[int], start: Any, top: Any, vocab_size: int) -> None:
    if start is not None and not -1 <= int(start) <= len(prompt):
        raise RequestError(f"logprob_start_len: {start} is outside [-1, {len(prompt)}] for '{where}'")
    if top is not None and not 0 <= int(top) <= min(MAX_TOP_LOGPROBS, vocab_size):
        raise RequestError(f"top_logprobs_num: {top} is outside [0, {min(MAX_TOP_LOGPROBS, vocab_size)}]")
