"""OpenAI-compatible ``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions`` as SGLang serves them.

Shapes from SGLang 0.5.23's ``srt/entrypoints/openai/protocol.py`` (``ModelCard``, ``CompletionRequest``,
``ChatCompletionRequest``, ``CompletionResponse``, ``ChatCompletionResponse``, ``UsageInfo``) and the
``/v1/models`` routes of ``http_server.py``. Like SGLang's pydantic models, unknown fields are ignored.
Requests are translated to ``/generate`` items and run by the same engine; ``stream=true`` is refused here
(use ``/generate`` with ``stream``). Chat messages are rendered and tokenized by the tokenizer's chat template
(a Hugging Face directory's own, as SGLang's ``serving_chat.py`` does with ``tokenize=True``); OpenAI's lists
of text parts are joined into one string first. The served name is SGLang's ``served_model_name`` (default: the
model path; it follows ``/update_weights_from_disk`` to the new path, as ``tokenizer_manager.py`` does).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict

from actors.cpu_engine.protocol import RequestError, expand_generate_request, parse
from actors.cpu_engine.routes import ENGINE, json_body
from actors.tokenizer import message_text


class _OpenAIRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    model: str = "default"
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    n: int = 1
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    top_k: int = -1
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    stop_token_ids: list[int] | None = None
    no_stop_trim: bool = False
    ignore_eos: bool = False
    skip_special_tokens: bool = True


class CompletionRequest(_OpenAIRequest):
    prompt: list[int] | list[list[int]] | str | list[str]
    echo: bool = False
    logprobs: int | None = None
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    min_tokens: int = 0


class ChatCompletionRequest(_OpenAIRequest):
    messages: list[dict[str, Any]]
    logprobs: bool = False
    top_logprobs: int | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    min_tokens: int = 0


def _sampling(request: _OpenAIRequest, max_new_tokens: int | None, temperature: float, top_p: float) -> dict[str, Any]:
    return {
        "max_new_tokens": max_new_tokens,
        "min_new_tokens": getattr(request, "min_tokens", 0),
        "temperature": temperature,
        "top_p": top_p,
        "top_k": request.top_k,
        "min_p": request.min_p,
        "frequency_penalty": request.frequency_penalty,
        "presence_penalty": request.presence_penalty,
        "repetition_penalty": request.repetition_penalty,
        "stop": request.stop,
        "stop_token_ids": request.stop_token_ids,
        "no_stop_trim": request.no_stop_trim,
        "ignore_eos": request.ignore_eos,
        "skip_special_tokens": request.skip_special_tokens,
        "logit_bias": request.logit_bias,
        "sampling_seed": request.seed,
        "n": request.n,
    }


async def _run(request: web.Request, body: dict[str, Any]) -> list[dict[str, Any]]:
    engine = request.app[ENGINE]
    batch = expand_generate_request(
        body,
        vocab_size=engine.model.config.vocab_size,
        context_length=engine.settings.context_length,
        tokenizer=engine.tokenizer,
    )
    return await engine.generate(batch.items)


def _check_model(request: web.Request, model: str) -> None:
    served = request.app[ENGINE].served_model_name
    if model not in (served, "default"):
        raise RequestError(f"model: the model '{model}' does not exist; this server serves '{served}'", status=404)


def _finish(result: dict[str, Any]) -> tuple[str | None, Any]:
    reason = result["meta_info"]["finish_reason"] or {}
    return reason.get("type"), reason.get("matched")


def _usage(results: list[dict[str, Any]], prompts: int) -> dict[str, Any]:
    """``UsageInfo``: prompt tokens counted once per prompt (not per ``n`` sample), as SGLang's UsageProcessor."""
    metas = [r["meta_info"] for r in results]
    per_prompt = len(metas) // max(1, prompts)
    prompt_tokens = sum(m["prompt_tokens"] for m in metas[:: max(1, per_prompt)])
    completion = sum(m["completion_tokens"] for m in metas)
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": sum(m["cached_tokens"] for m in metas)},
        "reasoning_tokens": 0,
    }


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [_card(request)]})


async def model(request: web.Request) -> web.Response:
    name = request.match_info["model"]
    if name != request.app[ENGINE].served_model_name:
        error = {"message": f"The model '{name}' does not exist", "type": "invalid_request_error"}
        return web.json_response({"error": {**error, "param": "model", "code": "model_not_found"}}, status=404)
    return web.json_response(_card(request))


def _card(request: web.Request) -> dict[str, Any]:
    engine = request.app[ENGINE]
    name = engine.served_model_name
    return {
        "id": name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "sglang",
        "root": name,
        "parent": None,
        "max_model_len": engine.settings.context_length,
    }


async def completions(request: web.Request) -> web.Response:
    body: CompletionRequest = parse(CompletionRequest, await json_body(request))
    _check_model(request, body.model)
    if body.stream:
        raise RequestError("stream: streaming /v1/completions is not supported by the CPU engine; use /generate")
    prompt = body.prompt
    field = "input_ids" if isinstance(prompt, list) and prompt and not isinstance(prompt[0], str) else "text"
    generate = {
        field: prompt,
        "sampling_params": _sampling(body, body.max_tokens, body.temperature, body.top_p),
        "return_logprob": body.logprobs is not None,
        "top_logprobs_num": body.logprobs or 0,
        "return_text_in_logprobs": True,
    }
    results = await _run(request, generate)
    prompts = len(prompt) if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)) else 1
    choices = []
    for index, result in enumerate(results):
        reason, matched = _finish(result)
        choice = {"index": index, "text": result["text"], "logprobs": None}
        if body.logprobs is not None:
            choice["logprobs"] = _completion_logprobs(result["meta_info"])
        choices.append({**choice, "finish_reason": reason, "matched_stop": matched})
    reply = {"id": uuid.uuid4().hex, "object": "text_completion", "created": int(time.time()), "model": body.model}
    return web.json_response({**reply, "choices": choices, "usage": _usage(results, prompts), "metadata": None})


def _completion_logprobs(meta: dict[str, Any]) -> dict[str, Any]:
    """SGLang's ``LogProbs``: tokens, their logprobs, offsets and ``{token: logprob}`` top alternatives."""
    entries = meta.get("output_token_logprobs", [])
    tops = meta.get("output_top_logprobs") or [None] * len(entries)
    offsets, offset = [], 0
    for _, _, text in entries:
        offsets.append(offset)
        offset += len(text or "")
    return {
        "text_offset": offsets,
        "token_logprobs": [lp for lp, _, _ in entries],
        "tokens": [text for _, _, text in entries],
        "top_logprobs": [None if top is None else {t: lp for lp, _, t in top} for top in tops],
    }


async def chat_completions(request: web.Request) -> web.Response:
    body: ChatCompletionRequest = parse(ChatCompletionRequest, await json_body(request))
    _check_model(request, body.model)
    if body.stream:
        raise RequestError("stream: streaming /v1/chat/completions is not supported by the CPU engine; use /generate")
    input_ids = _chat_input_ids(request.app[ENGINE].tokenizer, body.messages)
    max_new = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    temperature = 1.0 if body.temperature is None else body.temperature
    generate = {
        "input_ids": input_ids,
        "sampling_params": _sampling(body, max_new, temperature, 1.0 if body.top_p is None else body.top_p),
        "return_logprob": body.logprobs,
        "top_logprobs_num": body.top_logprobs or 0,
        "return_text_in_logprobs": True,
    }
    results = await _run(request, generate)
    choices = []
    for index, result in enumerate(results):
        reason, matched = _finish(result)
        message = {"role": "assistant", "content": result["text"], "reasoning_content": None}
        logprobs = _chat_logprobs(result["meta_info"]) if body.logprobs else None
        choices.append(
            {"index": index, "message": message, "logprobs": logprobs, "finish_reason": reason, "matched_stop": matched}
        )
    reply = {"id": uuid.uuid4().hex, "object": "chat.completion", "created": int(time.time()), "model": body.model}
    return web.json_response({**reply, "choices": choices, "usage": _usage(results, 1), "metadata": None})


def _chat_input_ids(tokenizer: Any, messages: list[dict[str, Any]]) -> list[int]:
    """The prompt of a chat request: ``messages`` through the tokenizer's chat template; a 400 if it refuses."""
    try:
        plain = [{**m, "content": message_text(m.get("content"), i)} for i, m in enumerate(messages)]
        return list(tokenizer.apply_chat_template(plain, add_generation_prompt=True))
    except Exception as exc:  # jinja templates raise what they like (TemplateError, ValueError, TypeError ...)
        raise RequestError(f"messages: the chat template refused them: {exc}") from exc


def _chat_logprobs(meta: dict[str, Any]) -> dict[str, Any]:
    """SGLang's ``ChoiceLogprobs``: one ``{token, bytes, logprob, top_logprobs}`` per generated token."""
    entries = meta.get("output_token_logprobs", [])
    tops = meta.get("output_top_logprobs") or [[] for _ in entries]
    content = []
    for (logprob, _, text), top in zip(entries, tops, strict=True):
        alternatives = [{"token": t, "bytes": list(t.encode()), "logprob": lp} for lp, _, t in top or []]
        content.append({"token": text, "bytes": list(text.encode()), "logprob": logprob, "top_logprobs": alternatives})
    return {"content": content}


def add_routes(app: web.Application) -> None:
    app.add_routes(
        [
            web.get("/v1/models", models),
            web.get("/v1/models/{model:.*}", model),
            web.post("/v1/completions", completions),
            web.post("/v1/chat/completions", chat_completions),
        ]
    )
