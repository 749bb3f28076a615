"""``stream=true`` on ``/v1/completions`` and ``/v1/chat/completions``: SGLang 0.5.23's SSE answers.

As ``serving_completions._generate_completion_stream`` and ``serving_chat._generate_chat_stream`` (no parsers)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from aiohttp import web

from actors.cpu_engine import openai_shapes as shapes
from actors.cpu_engine.openai_protocol import ChatCompletionRequest, CompletionRequest
from actors.cpu_engine.protocol import GenerationItem, RequestError

if TYPE_CHECKING:
    from actors.cpu_engine.engine import CPUEngine

DONE = "data: [DONE]\n\n"


# As SGLang's handlers do, the first chunk is produced before the response starts, so an error before any output
# is an ordinary JSON error; an error after it is an {"error": ...} chunk (as SGLang reports an abort carrying a
# status code), followed by the closing chunks.
async def respond(request: web.Request, chunks: AsyncIterator[str]) -> web.StreamResponse:
    """Send ``chunks`` as an event stream; a :class:`RequestError` before the first chunk is raised instead."""
    try:
        first = await chunks.__anext__()
    except StopAsyncIteration:
        first = ""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    try:
        await response.write(first.encode())
        async for chunk in chunks:
            await response.write(chunk.encode())
    finally:
        await chunks.aclose()  # a client gone mid-stream: the engine aborts what it was generating
    await response.write_eof()
    return response


class _Tally:
    """Per-choice counters: text sent, logprobs sent, and token counts for usage."""

    def __init__(self) -> None:
        self.text_sent: dict[int, int] = {}
        self.logprobs_sent: dict[int, int] = {}
        self.prompt: dict[int, int] = {}
        self.completion: dict[int, int] = {}
        self.cached: dict[int, int] = {}

    def update(self, index: int, content: dict[str, Any]) -> tuple[bool, str]:
        """Record ``content``; returns (first result of this choice, text added since the last one)."""
        meta = content["meta_info"]
        self.prompt[index], self.completion[index] = meta["prompt_tokens"], meta["completion_tokens"]
        self.cached[index] = meta["cached_tokens"]
        first = index not in self.text_sent
        delta = content["text"][self.text_sent.get(index, 0) :]
        self.text_sent[index] = len(content["text"])
        return first, delta

    def new_logprobs(self, index: int, meta: dict[str, Any]) -> tuple[list[Any], list[Any]] | None:
        """The output logprobs (and top logprobs) not sent yet; None when there are none."""
        sent, total = self.logprobs_sent.get(index, 0), meta["output_token_logprobs_length"]
        self.logprobs_sent[index] = total
        if sent >= total:
            return None
        return meta["output_token_logprobs"][sent:total], (meta.get("output_top_logprobs") or [])[sent:total]

    def usage(self, index: int, cached: bool) -> dict[str, Any]:
        return shapes.token_usage(self.prompt[index], self.completion[index], self.cached[index] if cached else None)

    def final_usage(self, n: int, cached: bool) -> dict[str, Any]:
        return shapes.streaming_usage(self.prompt, self.completion, self.cached, n, cached)


async def _contents(engine: CPUEngine, items: list[GenerationItem]) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """``(index, /generate result so far)`` as ``tokenizer_manager`` streams a batch."""
    async for snapshot in engine.generate_stream(items):
        for index, result in snapshot:
            yield index, result


async def completion_chunks(
    engine: CPUEngine, items: list[GenerationItem], body: CompletionRequest, echoes: list[str] | None
) -> AsyncIterator[str]:
    """``_generate_completion_stream``."""
    created, tally, last_id, started = int(time.time()), _Tally(), items[0].rid, False
    include_usage, continuous = body.usage_wanted()
    ids_sent: dict[int, int] = {}
    try:
        async for index, content in _contents(engine, items):
            meta, (first, delta) = content["meta_info"], tally.update(index, content)
            last_id = meta["id"]
            echoed = first and body.echo and bool(body.logprobs)
            logprobs = None
            if body.logprobs is not None:
                new = tally.new_logprobs(index, meta)
                if new is not None or echoed:
                    output, output_top = new or ([], [])
                    prompt = (meta["input_token_logprobs"], meta.get("input_top_logprobs")) if echoed else (None, None)
                    logprobs = shapes.completion_logprobs(output, output_top, *prompt)
            reason, matched = shapes.finish(content)
            text = (echoes[index] if first and echoes else "") + delta
            choice = {"index": index, "text": text, "logprobs": logprobs}
            choice |= {"finish_reason": reason, "matched_stop": matched}
            if body.return_token_ids:
                choice["token_ids"] = content["output_ids"][ids_sent.get(index, 0) :]
                ids_sent[index] = len(content["output_ids"])
                if first:
                    choice["prompt_token_ids"] = items[index].input_ids
            chunk = {"id": meta["id"], "object": "text_completion", "created": created, "model": body.model}
            usage = tally.usage(index, cached=False) if continuous else None
            yield shapes.sse({**chunk, "choices": [choice], "usage": usage})
            started = True
    except RequestError as exc:
        if not started:
            raise
        yield shapes.status_error_chunk(exc.message, exc.status)
    if include_usage and tally.prompt:
        usage = tally.final_usage(body.n, engine.settings.enable_cache_report)
        chunk = {"id": last_id, "object": "text_completion", "created": created, "model": body.model, "choices": []}
        yield shapes.sse({**chunk, "usage": {k: v for k, v in usage.items() if v is not None}})  # exclude_none
    yield DONE


def _chat_chunk(chunk_id: str, created: int, model: str, index: int, delta: dict[str, Any], **fields: Any) -> str:
    """``sse_utils.build_sse_content``: ``reasoning_content`` always in the delta, ``usage`` only when set."""
    usage = fields.pop("usage", None)
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None, "matched_stop": None}
    chunk: dict[str, Any] = {"id": chunk_id, "object": "chat.completion.chunk", "created": created, "model": model}
    chunk["choices"] = [{**choice, **fields}]
    if usage is not None:
        chunk["usage"] = usage
    return shapes.sse(chunk)


# Per choice: a first chunk with delta.role, then delta.content chunks only when text was added (the logprobs of
# a step that added none are dropped, as SGLang does), then one chunk per finished choice with its finish_reason.
# Both streams: usage on every chunk with stream_options.continuous_usage_stats, a final "choices: []" usage chunk
# with include_usage, then [DONE]; chunk ids are the choice's request id (meta_info.id).
async def chat_chunks(
    engine: CPUEngine, items: list[GenerationItem], body: ChatCompletionRequest
) -> AsyncIterator[str]:
    """``_generate_chat_stream`` without reasoning or tool-call parsing."""
    created, tally, last_id, started = int(time.time()), _Tally(), items[0].rid, False
    include_usage, continuous = body.usage_wanted()
    cache_report = engine.settings.enable_cache_report
    finished: dict[int, dict[str, Any]] = {}
    try:
        async for index, content in _contents(engine, items):
            meta, (first, delta) = content["meta_info"], tally.update(index, content)
            last_id = meta["id"]
            logprobs = None
            if body.logprobs and (new := tally.new_logprobs(index, meta)) is not None:
                logprobs = shapes.chat_logprobs(*new)
            if meta["finish_reason"]:
                finished[index] = meta["finish_reason"]
            if first:
                role = {"reasoning_content": None, "role": "assistant", "content": ""}
                yield _chat_chunk(meta["id"], created, body.model, index, role)
                started = True
            if delta:
                usage = tally.usage(index, cache_report) if continuous else None
                text = {"reasoning_content": None, "content": delta}
                yield _chat_chunk(meta["id"], created, body.model, index, text, logprobs=logprobs, usage=usage)
    except RequestError as exc:
        if not started:
            raise
        yield shapes.status_error_chunk(exc.message, exc.status)
    for index, reason in finished.items():
        end = {"finish_reason": reason["type"], "matched_stop": reason.get("matched")}
        yield _chat_chunk(last_id, created, body.model, index, {"reasoning_content": None}, **end)
    if include_usage and tally.prompt:
        usage = tally.final_usage(body.n, cache_report)
        chunk = {"id": last_id, "object": "chat.completion.chunk", "created": created, "model": body.model}
        yield shapes.sse({**chunk, "choices": [], "usage": usage})
    yield DONE
