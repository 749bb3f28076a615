"""OpenAI-compatible ``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions`` as SGLang 0.5.23 serves them.

Shapes from its ``srt/entrypoints/openai/`` (``protocol.py``, ``serving_completions.py``, ``serving_chat.py``)."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from actors.cpu_engine import openai_shapes as shapes
from actors.cpu_engine import openai_stream
from actors.cpu_engine.openai_protocol import ChatCompletionRequest, CompletionRequest, OpenAIServingRequest
from actors.cpu_engine.protocol import GenerateBatch, GenerationItem, RequestError, expand_generate_request, parse
from actors.cpu_engine.routes import ENGINE, json_body
from actors.tokenizer import message_text

# Request fields SGLang forwards to GenerateReqInput unchanged; /generate's checks refuse any non-neutral value of
# what we lack (constrained decoding, LoRA, sessions ...). Unknown fields are ignored, as SGLang's are.
PASSED_THROUGH = ("rid", "lora_path", "session_id", "custom_logit_processor", "return_hidden_states")
PASSED_THROUGH += ("return_routed_experts", "extra_key", "cache_salt", "priority", "routed_dp_rank")
CONSTRAINED_FORMATS = ("json_schema", "json_object", "structural_tag")


def _sampling(request: OpenAIServingRequest, max_new_tokens: int | None) -> dict[str, Any]:
    """``_build_sampling_params`` / ``ChatCompletionRequest.to_sampling_params`` with OpenAI's defaults."""
    if request.response_format and request.response_format.get("type") in CONSTRAINED_FORMATS:
        raise RequestError(f"response_format: {request.response_format['type']!r} is not supported by the CPU engine")
    pick = lambda value, default: default if value is None else value  # noqa: E731
    return {
        "max_new_tokens": max_new_tokens,
        "min_new_tokens": request.min_tokens,
        "temperature": pick(request.temperature, 1.0),
        "top_p": pick(request.top_p, 1.0),
        "top_k": pick(request.top_k, -1),
        "min_p": pick(request.min_p, 0.0),
        "frequency_penalty": request.frequency_penalty,
        "presence_penalty": request.presence_penalty,
        "repetition_penalty": pick(request.repetition_penalty, 1.0),
        "stop": request.stop,
        "stop_token_ids": request.stop_token_ids,
        "stop_regex": request.stop_regex,
        "regex": request.regex,
        "ebnf": request.ebnf,
        "json_schema": getattr(request, "json_schema", None),
        "no_stop_trim": request.no_stop_trim,
        "ignore_eos": request.ignore_eos,
        "skip_special_tokens": request.skip_special_tokens,
        "logit_bias": request.logit_bias,
        "custom_params": request.custom_params,
        "watermark": request.watermark,
        "sampling_seed": request.seed,
        "n": request.n,
    }


def _expand(request: web.Request, body: dict[str, Any], openai: OpenAIServingRequest) -> GenerateBatch:
    """The ``/generate`` items of an OpenAI request (SGLang's ``_convert_to_internal_request``)."""
    engine = request.app[ENGINE]
    passed = {name: getattr(openai, name) for name in PASSED_THROUGH}
    passed["lora_path"] = _lora_from_model(request, openai.model) or openai.lora_path
    body = {**body, **{name: value for name, value in passed.items() if value is not None}}
    return expand_generate_request(
        body,
        vocab_size=engine.model.config.vocab_size,
        context_length=engine.settings.context_length,
        tokenizer=engine.tokenizer,
    )


async def _run(request: web.Request, items: list[GenerationItem]) -> list[dict[str, Any]]:
    """The items' results; an abort carrying an error status fails the request, as tokenizer_manager does."""
    results = await request.app[ENGINE].generate(items)
    for result in results:
        reason = result["meta_info"]["finish_reason"] or {}
        if reason.get("type") == "abort" and (reason.get("status_code") or 0) >= 400:
            raise RequestError(reason.get("message", "Generation aborted."), status=reason["status_code"])
    return results


def _lora_from_model(request: web.Request, model: str) -> str | None:
    """``serving_base._parse_model_parameter``: ``base-model:adapter`` names a LoRA adapter (refused here)."""
    served = request.app[ENGINE].weights.served_model_name
    if ":" not in model or model == served:
        return None
    adapter = model[len(served) + 1 :] if model.startswith(served + ":") else model.split(":", 1)[1]
    return adapter.strip() or None


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [_card(request)]})


async def model(request: web.Request) -> web.Response:
    name = request.match_info["model"]
    if name != request.app[ENGINE].weights.served_model_name:
        error = {"message": f"The model '{name}' does not exist", "type": "invalid_request_error"}
        return web.json_response({"error": {**error, "param": "model", "code": "model_not_found"}}, status=404)
    return web.json_response(_card(request))


# The served name is SGLang's served_model_name (default: the model path); it follows /update_weights_from_disk
# to the new path, as tokenizer_manager.py does.
def _card(request: web.Request) -> dict[str, Any]:
    engine = request.app[ENGINE]
    name = engine.weights.served_model_name
    return {
        "id": name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "sglang",
        "root": name,
        "parent": None,
        "max_model_len": engine.settings.context_length,
    }


async def completions(request: web.Request) -> web.StreamResponse:
    """``serving_completions.py``: ``OpenAIServingCompletion``."""
    body: CompletionRequest = parse(CompletionRequest, await json_body(request))
    prompt = body.prompt
    if not prompt or (isinstance(prompt, list) and all(not p for p in prompt)):
        raise RequestError("Prompt cannot be empty")
    field = "text" if isinstance(prompt, str) or isinstance(prompt[0], str) else "input_ids"
    generate = {
        field: prompt,
        "sampling_params": _sampling(body, body.max_tokens),
        "return_logprob": body.logprobs is not None,
        "top_logprobs_num": body.logprobs or 0,
        "logprob_start_len": 0 if body.echo and body.logprobs else -1,
        "return_text_in_logprobs": True,
    }
    batch = _expand(request, generate, body)
    echoes = _echo_texts(request, body, batch.items) if body.echo else None
    if body.stream:
        chunks = openai_stream.completion_chunks(request.app[ENGINE], batch.items, body, echoes)
        return await openai_stream.respond(request, chunks)
    results = await _run(request, batch.items)
    choices = [_completion_choice(body, i, result, batch.items[i], echoes) for i, result in enumerate(results)]
    reply = {"id": results[0]["meta_info"]["id"], "object": "text_completion", "created": int(time.time())}
    usage = shapes.response_usage(results, body.n, request.app[ENGINE].settings.enable_cache_report)
    reply |= {"model": body.model, "choices": choices, "usage": usage}
    return web.json_response({**reply, "metadata": shapes.metadata(results[0]["meta_info"])})


def _echo_texts(request: web.Request, body: CompletionRequest, items: list[GenerationItem]) -> list[str]:
    """``_prepare_echo_prompts`` / ``_get_echo_text``: each choice's prompt, text as sent or ids decoded."""
    prompt = body.prompt
    if isinstance(prompt, str):
        return [prompt] * len(items)
    if isinstance(prompt[0], str):
        return [str(prompt[index // body.n]) for index in range(len(items))]
    return [request.app[ENGINE].tokenizer.decode(item.input_ids) for item in items]


def _completion_choice(
    body: CompletionRequest, index: int, result: dict[str, Any], item: GenerationItem, echoes: list[str] | None
) -> dict[str, Any]:
    """``_build_completion_response``: one ``CompletionResponseChoice``."""
    meta = result["meta_info"]
    logprobs = None
    if body.logprobs is not None:
        echoed = body.echo and body.logprobs
        logprobs = shapes.completion_logprobs(
            meta.get("output_token_logprobs", []),
            meta.get("output_top_logprobs", []),
            meta["input_token_logprobs"] if echoed else None,
            meta.get("input_top_logprobs") if echoed else None,
        )
    reason, matched = shapes.finish(result)
    text = (echoes[index] if echoes else "") + result["text"]
    choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": reason, "matched_stop": matched}
    if body.return_token_ids:
        choice |= {"token_ids": result["output_ids"], "prompt_token_ids": item.input_ids}
    return choice


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """``serving_chat.py``: ``OpenAIServingChat`` without reasoning or tool-call parsers."""
    body: ChatCompletionRequest = parse(ChatCompletionRequest, await json_body(request))
    if not body.messages:
        raise RequestError("Messages cannot be empty.")
    if body.stream:
        _check_streamable(body)
    input_ids = body.input_ids or _chat_input_ids(request.app[ENGINE].tokenizer, body.messages)
    generate = {
        "input_ids": input_ids,
        "sampling_params": _sampling(body, body.max_completion_tokens or body.max_tokens),
        "return_logprob": body.logprobs,
        "logprob_start_len": -1,
        "top_logprobs_num": body.top_logprobs or 0,
        "return_text_in_logprobs": True,
    }
    batch = _expand(request, generate, body)
    if body.stream:
        return await openai_stream.respond(request, openai_stream.chat_chunks(request.app[ENGINE], batch.items, body))
    results = await _run(request, batch.items)
    choices = [_chat_choice(body, index, result, input_ids) for index, result in enumerate(results)]
    reply = {"id": results[0]["meta_info"]["id"], "object": "chat.completion", "created": int(time.time())}
    usage = shapes.response_usage(results, body.n, request.app[ENGINE].settings.enable_cache_report)
    reply |= {"model": body.model, "choices": choices, "usage": usage}
    return web.json_response({**reply, "metadata": shapes.metadata(results[0]["meta_info"])})


def _check_streamable(body: ChatCompletionRequest) -> None:
    """``_convert_to_internal_request``: what chat streaming refuses."""
    if body.return_prompt_token_ids:
        raise RequestError(
            "return_prompt_token_ids is not supported with streaming. "
            "Please set stream=false when using return_prompt_token_ids=true."
        )
    if body.return_token_ids:
        raise RequestError(
            "return_token_ids is not supported with streaming on /v1/chat/completions. "
            "Please set stream=false when using return_token_ids=true."
        )
    if body.return_meta_info:
        raise RequestError(
            "return_meta_info is not supported with streaming. "
            "Please set stream=false when using return_meta_info=true."
        )


def _chat_choice(body: ChatCompletionRequest, index: int, result: dict[str, Any], prompt: list[int]) -> dict[str, Any]:
    """``_build_chat_response``: one ``ChatCompletionResponseChoice``."""
    meta = result["meta_info"]
    logprobs = None
    if body.logprobs:
        logprobs = shapes.chat_logprobs(meta["output_token_logprobs"], meta.get("output_top_logprobs"))
    reason, matched = shapes.finish(result)
    message = {"role": "assistant", "content": result["text"] or "", "reasoning_content": None}
    choice = {"index": index, "message": message, "logprobs": logprobs}
    choice |= {"finish_reason": reason, "matched_stop": matched}
    if body.return_prompt_token_ids or body.return_token_ids:
        choice["prompt_token_ids"] = prompt
    if body.return_token_ids:
        choice["response_token_ids"] = result["output_ids"]
    if body.return_meta_info:
        choice["meta_info"] = meta
    return choice


# Chat messages are rendered and tokenized by the tokenizer's chat template (as serving_chat.py with
# tokenize=True) unless input_ids is given; OpenAI's lists of text parts are joined into one string first.
def _chat_input_ids(tokenizer: Any, messages: list[dict[str, Any]]) -> list[int]:
    """The prompt of a chat request: ``messages`` through the tokenizer's chat template; a 400 if it refuses."""
    try:
        plain = [{**m, "content": message_text(m.get("content"), i)} for i, m in enumerate(messages)]
        return list(tokenizer.apply_chat_template(plain, add_generation_prompt=True))
    except Exception as exc:  # jinja templates raise what they like (TemplateError, ValueError, TypeError ...)
        raise RequestError(f"messages: the chat template refused them: {exc}") from exc


def add_routes(app: web.Application) -> None:
    app.add_routes(
        [
            web.get("/v1/models", models),
            web.get("/v1/models/{model:.*}", model),
            web.post("/v1/completions", completions),
            web.post("/v1/chat/completions", chat_completions),
        ]
    )
