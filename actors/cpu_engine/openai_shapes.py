"""The pieces of SGLang 0.5.23's OpenAI responses built from ``/generate`` results (usage, logprobs, metadata, error
chunks), shared by the plain and the streamed answers; each function names the SGLang function it follows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

Triple = list[Any]  # [logprob, token id, token text]


def sse(payload: Any) -> str:
    return f"data: {json.dumps(payload)}\n\n"


def error_chunk(message: str, err_type: str = "BadRequestError", code: int = 400) -> str:
    """``serving_base.create_streaming_error_response``: ``data: {"error": ErrorResponse}``."""
    error = {"object": "error", "message": message, "type": err_type, "param": None, "code": code}
    return sse({"error": error})


def status_error_chunk(message: str, status: int) -> str:
    """A system error mid-stream, as SGLang reports an abort carrying a status code (``code.name``/``value``)."""
    name = HTTPStatus(status).name if status in HTTPStatus._value2member_map_ else str(status)
    return error_chunk(message, name, status)


def finish(result: Mapping[str, Any]) -> tuple[str | None, Any]:
    """``finish_reason`` type and ``matched_stop`` of a ``/generate`` result."""
    reason = result["meta_info"]["finish_reason"] or {}
    return reason.get("type"), reason.get("matched")


def metadata(meta: Mapping[str, Any]) -> dict[str, Any]:
    """``utils/weight_versions.build_endpoint_weight_version_metadata``."""
    return {"weight_version": meta["weight_version"]}


def token_usage(prompt_tokens: int, completion_tokens: int, cached: int | None) -> dict[str, Any]:
    """``openai/usage_processor.py`` ``UsageProcessor.calculate_token_usage`` dumped: no reasoning tokens; cached
    only with cache reports."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None if cached is None else {"cached_tokens": cached},
        "reasoning_tokens": 0,
        "completion_tokens_details": None,
    }


def response_usage(results: list[dict[str, Any]], n: int, cache_report: bool) -> dict[str, Any]:
    """``calculate_response_usage``: prompt and cached tokens counted once per prompt (every ``n``-th result)."""
    metas = [r["meta_info"] for r in results]
    cached = sum(m["cached_tokens"] for m in metas[::n]) if cache_report else None
    return token_usage(sum(m["prompt_tokens"] for m in metas[::n]), sum(m["completion_tokens"] for m in metas), cached)


def streaming_usage(
    prompt: dict[int, int], completion: dict[int, int], cached: dict[int, int], n: int, cache_report: bool
) -> dict[str, Any]:
    """``calculate_streaming_usage``: choices whose ``index % n == 0`` stand for their prompt."""
    first = [index for index in prompt if index % n == 0]
    cached_total = sum(cached[index] for index in first) if cache_report else None
    return token_usage(sum(prompt[index] for index in first), sum(completion.values()), cached_total)


def completion_logprobs(
    output: list[Triple],
    output_top: list[list[Triple] | None],
    prompt: list[Triple] | None = None,
    prompt_top: list[list[Triple] | None] | None = None,
) -> dict[str, Any]:
    """``openai/utils.py`` ``to_openai_style_logprobs``: prompt entries (echo) then output ones; ``text_offset`` is
    -1 (SGLang)."""
    entries = [*(prompt or []), *output]
    tops = [*(prompt_top or []), *output_top]
    return {
        "text_offset": [-1] * len(entries),
        "token_logprobs": [logprob for logprob, _, _ in entries],
        "tokens": [text or "" for _, _, text in entries],
        "top_logprobs": [None if top is None else {t or "": lp for lp, _, t in top} for top in tops],
    }


def chat_logprobs(output: list[Triple], output_top: list[list[Triple] | None] | None) -> dict[str, Any]:
    """``ChoiceLogprobs`` as ``serving_chat._build_token_logprobs_from_raw`` builds it: one ``{token, bytes, logprob,
    top_logprobs}`` per generated token."""
    content = []
    for index, (logprob, _, text) in enumerate(output):
        row = output_top[index] if output_top and index < len(output_top) else None
        alternatives = [{"token": t or "", "bytes": list((t or "").encode()), "logprob": lp} for lp, _, t in row or []]
        token = text or ""
        entry = {"token": token, "bytes": list(token.encode()), "logprob": logprob}
        content.append({**entry, "top_logprobs": alternatives})
    return {"content": content}
