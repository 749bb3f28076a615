"""The CPU engine's OpenAI-compatible API against SGLang 0.5.23's: one case per response and stream shape.

Sources: ``srt/entrypoints/openai/protocol.py``, ``serving_completions.py``, ``serving_chat.py``,
``sse_utils.py`` and ``usage_processor.py`` (see tests/actors/sglang_source.py for where they are read from).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
import requests

from tests.actors.sglang_engine import TIMEOUT_S, generate, get, hold_a_running_stream, post, start_engine

pytestmark = pytest.mark.processes

if TYPE_CHECKING:
    from tests.actors.conftest import EngineLauncher, EngineProcess


@pytest.fixture(scope="module")
def engine(spawn_module_engine: EngineLauncher) -> EngineProcess:
    return start_engine(spawn_module_engine)


def test_openai_models_completions_and_chat(engine: EngineProcess) -> None:
    """openai/protocol.py: ModelList/ModelCard, CompletionResponse, ChatCompletionResponse, UsageInfo."""
    models = get(engine, "/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "tiny"
    assert models["data"][0]["owned_by"] == "sglang" and models["data"][0]["max_model_len"] == 128
    assert get(engine, "/v1/models/nope").json()["error"]["code"] == "model_not_found"
    body = {"model": "tiny", "prompt": "hello", "max_tokens": 4, "temperature": 0, "logprobs": 2, "ignore_eos": True}
    completion = post(engine, "/v1/completions", body).json()
    assert completion["metadata"] == {"weight_version": get(engine, "/model_info").json()["weight_version"]}
    assert completion["usage"]["prompt_tokens_details"] is None and completion["usage"]["reasoning_tokens"] == 0
    assert completion["choices"][0]["logprobs"]["text_offset"] == [-1] * 4
    assert post(engine, "/v1/completions", {**body, "model": "any-name"}).json()["model"] == "any-name"
    assert post(engine, "/v1/completions", {**body, "prompt": ""}).json()["message"] == "Prompt cannot be empty"
    echo = post(engine, "/v1/completions", {**body, "echo": True, "return_token_ids": True}).json()["choices"][0]
    assert echo["text"] == "hello" + completion["choices"][0]["text"] and len(echo["token_ids"]) == 4
    assert post(engine, "/v1/completions", {**body, "regex": "a+"}).status_code == 400  # not silently dropped
    assert completion["object"] == "text_completion" and completion["choices"][0]["finish_reason"] == "length"
    same = generate(engine, text="hello", sampling_params={"temperature": 0, "max_new_tokens": 4, "ignore_eos": True})
    assert completion["choices"][0]["text"] == same["text"]
    assert completion["usage"]["completion_tokens"] == 4 and completion["usage"]["prompt_tokens"] == 6
    assert len(completion["choices"][0]["logprobs"]["tokens"]) == 4
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0}
    answer = post(engine, "/v1/chat/completions", {**chat, "logprobs": True, "top_logprobs": 2}).json()
    assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["role"] == "assistant"
    assert len(answer["choices"][0]["logprobs"]["content"]) == answer["usage"]["completion_tokens"]
    refused = post(engine, "/v1/chat/completions", {**chat, "messages": [{"role": "robot", "content": "x"}]})
    assert refused.status_code == 400 and "role" in refused.json()["message"]


def _sse(engine: EngineProcess, path: str, body: dict[str, Any]) -> list[Any]:
    with requests.post(engine.url + path, json={**body, "stream": True}, stream=True, timeout=TIMEOUT_S) as reply:
        assert reply.status_code == 200 and reply.headers["Content-Type"].startswith("text/event-stream")
        lines = [line for line in reply.iter_lines() if line]
    assert lines[-1] == b"data: [DONE]" and all(line.startswith(b"data: ") for line in lines)
    return [json.loads(line.removeprefix(b"data: ")) for line in lines[:-1]]


def test_completions_stream_as_sglang(engine: EngineProcess) -> None:
    """openai/serving_completions.py ``_generate_completion_stream``: per-choice ``text_completion`` chunks (own id,
    text delta, new logprobs, finish_reason on the last), a ``choices: []`` usage chunk (exclude_none), [DONE]."""
    body = {"prompt": "hello", "max_tokens": 4, "temperature": 0, "ignore_eos": True, "n": 2, "logprobs": 1}
    body |= {"stream_options": {"include_usage": True}, "logit_bias": {"97": 50.0}}
    events = _sse(engine, "/v1/completions", body)
    *chunks, usage = events
    assert usage["choices"] == [] and usage["object"] == "text_completion" and usage["model"] == "default"
    assert usage["usage"] == {"prompt_tokens": 6, "total_tokens": 14, "completion_tokens": 8, "reasoning_tokens": 0}
    plain = post(engine, "/v1/completions", body | {"stream": False}).json()
    for index in (0, 1):
        mine = [c for c in chunks if c["choices"][0]["index"] == index]
        assert len({c["id"] for c in mine}) == 1 and mine[0]["usage"] is None
        choices = [c["choices"][0] for c in mine]
        assert all(set(c) == {"index", "text", "logprobs", "finish_reason", "matched_stop"} for c in choices)
        assert "".join(c["text"] for c in choices) == plain["choices"][index]["text"] == "aaaa"
        assert [c["finish_reason"] for c in choices] == [None] * (len(choices) - 1) + ["length"]
        tokens = [t for c in choices if c["logprobs"] for t in c["logprobs"]["tokens"]]
        offsets = [o for c in choices if c["logprobs"] for o in c["logprobs"]["text_offset"]]
        assert tokens == ["a"] * 4 and offsets == [-1] * 4
    echoed = _sse(engine, "/v1/completions", {**body, "n": 1, "echo": True, "logprobs": None})
    assert echoed[0]["choices"][0]["text"].startswith("hello") and echoed[-1]["choices"] == []


def test_chat_stream_as_sglang(engine: EngineProcess) -> None:
    """openai/serving_chat.py ``_generate_chat_stream`` and sse_utils.py ``build_sse_content``: a role chunk,
    content deltas with their logprobs, one finish_reason chunk per choice, the usage chunk, [DONE]."""
    messages = [{"role": "user", "content": "hi"}]
    body = {"messages": messages, "max_tokens": 5, "temperature": 0, "logprobs": True, "top_logprobs": 2}
    body |= {"stream_options": {"include_usage": True}, "logit_bias": {"98": 50.0}, "ignore_eos": True}
    *chunks, usage = _sse(engine, "/v1/chat/completions", body)
    assert all(c["object"] == "chat.completion.chunk" and "usage" not in c for c in chunks)
    choices = [c["choices"][0] for c in chunks]
    assert choices[0]["delta"] == {"reasoning_content": None, "role": "assistant", "content": ""}
    assert choices[-1] == {
        "index": 0, "delta": {"reasoning_content": None}, "logprobs": None, "finish_reason": "length",
        "matched_stop": None,
    }  # fmt: skip
    content = choices[1:-1]
    assert all(set(c["delta"]) == {"reasoning_content", "content"} and c["finish_reason"] is None for c in content)
    assert "".join(c["delta"]["content"] for c in content) == "bbbbb"
    logprobs = [e for c in content for e in c["logprobs"]["content"]]
    assert [e["token"] for e in logprobs] == ["b"] * 5 and all(len(e["top_logprobs"]) == 2 for e in logprobs)
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5
    assert usage["usage"]["prompt_tokens_details"] is None and usage["usage"]["completion_tokens_details"] is None
    refused = post(engine, "/v1/chat/completions", {**body, "stream": True, "return_token_ids": True})
    assert refused.status_code == 400 and "return_token_ids is not supported with streaming" in refused.text


def test_openai_stream_ends_with_an_abort_chunk(engine: EngineProcess) -> None:
    """serving_completions.py: a graceful abort (/abort_request, no status code) ends the choice with
    ``finish_reason: "abort"`` in a normal chunk; the stream still closes with [DONE]."""
    body = {"prompt": [256, 1, 2], "max_tokens": 100, "temperature": 0, "ignore_eos": True, "rid": "oai-held"}
    reply, lines = hold_a_running_stream(engine, "/v1/completions", body)
    try:
        assert post(engine, "/abort_request", {"rid": "oai-held"}).status_code == 200
    finally:
        post(engine, "/continue_generation", {})
        rest = [line for line in lines if line]
        reply.close()
    assert rest[-1] == b"data: [DONE]"
    last = json.loads(rest[-2].removeprefix(b"data: "))
    assert last["id"] == "oai-held" and last["choices"][0]["finish_reason"] == "abort"
