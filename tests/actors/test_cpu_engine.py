"""The CPU engine's HTTP API, served by a real subprocess."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests
import torch

from actors import tokenizer
from actors.cpu_engine import build_model
from actors.sglang_config import SGLangConfig, cpu_engine_argv
from actors.weights_wire import encode_named_tensors
from tests.actors.cpu_reference import GQA, greedy_batch

pytestmark = pytest.mark.processes

if TYPE_CHECKING:
    from tests.actors.conftest import EngineLauncher, EngineProcess

HTTP_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def engine(spawn_module_engine: EngineLauncher) -> EngineProcess:
    port = spawn_module_engine.free_port()
    config = SGLangConfig(model_path="unused", port=port, random_seed=11, served_model_name="tiny")
    argv = [*cpu_engine_argv(config, model_config=GQA), "--pause-wait-timeout", "2"]
    return spawn_module_engine(argv=argv, port=port)


def post(engine: EngineProcess, path: str, body: Any = None, **kwargs: Any) -> requests.Response:
    return requests.post(engine.url + path, json=body, timeout=HTTP_TIMEOUT_S, **kwargs)


def get(engine: EngineProcess, path: str) -> requests.Response:
    return requests.get(engine.url + path, timeout=HTTP_TIMEOUT_S)


def in_session(engine: EngineProcess, path: str, body: Any) -> requests.Response:
    """``path`` between /begin_weight_update and /end_weight_update, as SGLang 0.5.23 requires."""
    assert post(engine, "/begin_weight_update", {}).status_code == 200
    try:
        return post(engine, path, body)
    finally:
        assert post(engine, "/end_weight_update", {}).status_code == 200


def greedy(engine: EngineProcess, prompt: str = "The answer is", n: int = 16) -> dict[str, Any]:
    body = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}}
    reply = post(engine, "/generate", body)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_serves_every_endpoint(engine: EngineProcess) -> None:
    assert get(engine, "/health").status_code == 200
    assert get(engine, "/health_generate").status_code == 200
    params = {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True}
    body = {"input_ids": [256, 1, 2], "sampling_params": params, "return_logprob": True, "rid": "r-one"}
    one = post(engine, "/generate", body).json()
    version = get(engine, "/model_info").json()["weight_version"]
    meta = one["meta_info"]
    assert meta["id"] == "r-one" and meta["prompt_tokens"] == 3 and meta["completion_tokens"] == 4
    assert meta["finish_reason"] == {"type": "length", "length": 4} and meta["weight_version"] == version
    assert [entry[1] for entry in meta["output_token_logprobs"]] == one["output_ids"]
    assert all(entry[0] <= 0 and entry[2] is None for entry in meta["output_token_logprobs"])
    params = [{"max_new_tokens": 2}, {"max_new_tokens": 3, "ignore_eos": True}]
    batch = post(engine, "/generate", {"text": ["a", "bc"], "sampling_params": params}).json()
    assert len(batch) == 2 and batch[1]["meta_info"]["completion_tokens"] == 3
    assert batch[0]["meta_info"]["completion_tokens"] <= 2
    stop_at = greedy(engine, n=5)["output_ids"][1]
    params = {"temperature": 0, "stop_token_ids": [stop_at], "ignore_eos": True}
    stopped = post(engine, "/generate", {"text": "The answer is", "sampling_params": params}).json()
    assert stopped["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_at}
    for path in ("/get_model_info", "/model_info"):
        info = get(engine, path).json()
        assert info["weight_version"] == version and info["is_generation"] is True
    for path in ("/get_server_info", "/server_info"):
        info = get(engine, path).json()
        assert info["served_model_name"] == "tiny" and info["random_seed"] == 11 and info["tp_size"] == 1
    assert get(engine, "/flush_cache").status_code == 200 and post(engine, "/flush_cache").status_code == 200
    metrics = get(engine, "/metrics")
    assert metrics.headers["Content-Type"].startswith("text/plain")
    samples = [line for line in metrics.text.splitlines() if line.startswith("sglang:")]
    values = {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in samples}
    assert values["sglang:generation_tokens_total"] >= 9 and values["sglang:num_requests_total"] >= 3
    assert "sglang:num_running_reqs" in values and "sglang:num_queue_reqs" in values
    assert values["sglang:time_to_first_token_seconds_count"] >= 3 and "sglang:token_usage" in values


@pytest.mark.parametrize(
    ("path", "body", "status", "needle"),
    [
        ("/generate", b"{not json", 400, "not valid JSON"),
        ("/generate", {"text": "x", "input_ids": [1]}, 400, "exactly one of 'text' or 'input_ids'"),
        ("/generate", {"txt": "x"}, 400, "txt: not a field of SGLang's GenerateReqInput"),
        ("/generate", {"text": "x", "sampling_params": {"temprature": 0}}, 400, "sampling_params.temprature"),
        ("/generate", {"text": "x", "sampling_params": {"top_p": 2}}, 400, "sampling_params.top_p"),
        ("/generate", {"input_ids": [1, 260]}, 400, "'input_ids[1]' = 260 is outside the vocabulary"),
        ("/generate", {"input_ids": []}, 400, "'input_ids' is empty"),
        ("/generate", {"input_ids": [1] * 256}, 400, "model's context length (256 tokens)"),
        ("/generate", {"text": ["a", "b"], "sampling_params": [{}]}, 400, "'sampling_params' has 1 entries"),
        ("/generate", {"text": "x", "return_hidden_states": True}, 400, "return_hidden_states=true"),
        ("/update_weights_from_tensor", {}, 400, "serialized_named_tensors: Field required"),
        (
            "/update_weights_from_tensor",
            {"serialized_named_tensors": ["%%"]},
            400,
            "must run between begin_weight_update() and end_weight_update()",
        ),
        (
            "/update_weights_from_disk",
            {"model_path": "/no/such/dir"},
            400,
            "'/no/such/dir' is not a directory",
        ),
        (
            "/pause_generation",
            {"mode": "later"},
            400,
            "mode: Input should be 'abort', 'retract' or 'in_place'",
        ),
        ("/release_memory_occupation", {"tags": ["gpu"]}, 400, "tags.0"),
        ("/no_such_endpoint", {}, 404, "Not Found"),
    ],
)
def test_malformed_requests_get_4xx_naming_the_problem(
    engine: EngineProcess, path: str, body: Any, status: int, needle: str
) -> None:
    data = body if isinstance(body, bytes) else None
    reply = post(engine, path, None if data else body, data=data)
    assert reply.status_code == status, reply.text
    message = reply.json()["error"]["message"]
    assert needle in message, message


def test_weight_update_rejects_mismatched_tensors(engine: EngineProcess) -> None:
    before = greedy(engine)["output_ids"]
    bad = [("model.norm.weight", torch.ones(64)), ("lm_head.weight", torch.zeros(2, 2))]
    reply = in_session(engine, "/update_weights_from_tensor", {"serialized_named_tensors": [encode_named_tensors(bad)]})
    assert reply.status_code == 400 and "'lm_head.weight' has shape [2, 2]" in reply.json()["message"]
    assert reply.json()["success"] is False
    assert greedy(engine)["output_ids"] == before  # all-or-nothing: model.norm.weight was not applied either


def test_weight_updates_change_greedy_output_deterministically(engine: EngineProcess, tmp_path: Path) -> None:
    original = greedy(engine)
    new_model = build_model(GQA.model_copy(update={"seed": 99}))
    payload = encode_named_tensors(list(new_model.state_dict().items()))
    body = {"serialized_named_tensors": [payload], "flush_cache": True, "weight_version": "v-99"}
    reply = in_session(engine, "/update_weights_from_tensor", body)
    assert reply.status_code == 200 and reply.json()["success"] is True, reply.text
    updated = greedy(engine)
    assert updated["output_ids"] != original["output_ids"]
    assert updated["meta_info"]["weight_version"] == "v-99"
    assert get(engine, "/get_model_info").json()["weight_version"] == "v-99"
    expected = greedy_batch(new_model, [tokenizer.encode("The answer is")], 16)[0].output_ids
    assert updated["output_ids"] == expected  # same tokens as the in-process model with those weights
    assert in_session(engine, "/update_weights_from_tensor", body).status_code == 200
    assert greedy(engine)["output_ids"] == updated["output_ids"]
    # A partial update (one bucket) is accepted and only touches what it names.
    partial = {"serialized_named_tensors": [encode_named_tensors([("model.norm.weight", torch.full((64,), 2.0))])]}
    assert in_session(engine, "/update_weights_from_tensor", partial).json()["success"] is True
    norm = post(engine, "/get_weights_by_name", {"name": "model.norm.weight", "truncate_size": 3}).json()
    assert norm == [2.0, 2.0, 2.0]
    q_proj = post(
        engine, "/get_weights_by_name", {"name": "model.layers.0.self_attn.q_proj.weight", "truncate_size": 1}
    )
    expected_row = new_model.state_dict()["model.layers.0.self_attn.q_proj.weight"][:1].tolist()
    assert q_proj.json()[0] == pytest.approx(expected_row[0])
    # Back to the original weights from disk (a torch state dict file).
    torch.save(build_model(GQA).state_dict(), tmp_path / "pytorch_model.bin")
    reply = post(engine, "/update_weights_from_disk", {"model_path": str(tmp_path), "weight_version": "v-orig"})
    assert reply.status_code == 200, reply.text
    restored = greedy(engine)
    assert restored["output_ids"] == original["output_ids"]
    assert restored["meta_info"]["weight_version"] == "v-orig"
    assert get(engine, "/get_model_info").json()["model_path"] == str(tmp_path)


def test_paused_generation_waits_for_continue_or_deadline(engine: EngineProcess) -> None:
    assert post(engine, "/pause_generation", {"mode": "in_place"}).status_code == 200
    try:
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(greedy, engine)
            time.sleep(0.5)
            assert not waiting.done()
            assert post(engine, "/continue_generation").status_code == 200
            assert waiting.result(timeout=HTTP_TIMEOUT_S)["meta_info"]["completion_tokens"] == 16
        post(engine, "/pause_generation", {"mode": "abort"})
        started = time.monotonic()
        reply = post(engine, "/generate", {"text": "x"})
        assert reply.status_code == 503 and "/continue_generation" in reply.json()["error"]["message"]
        assert 1.5 < time.monotonic() - started < 10  # the engine runs with --pause-wait-timeout 2
    finally:
        post(engine, "/continue_generation")


def test_abort_request_finishes_it_as_aborted(engine: EngineProcess) -> None:
    post(engine, "/pause_generation", {"mode": "in_place"})
    try:
        with ThreadPoolExecutor(1) as pool:
            body = {
                "text": "x",
                "rid": "to-abort",
                "sampling_params": {"max_new_tokens": 200, "ignore_eos": True},
            }
            pending = pool.submit(post, engine, "/generate", body)
            deadline = time.monotonic() + 10
            while get(engine, "/server_info").json()["internal_states"][0]["num_in_flight"] != 1:
                assert time.monotonic() < deadline, "request never arrived"
                time.sleep(0.05)
            aborted = post(engine, "/abort_request", {"rid": "to-abort"})
            assert aborted.status_code == 200 and aborted.content == b""  # SGLang answers an empty 200
            post(engine, "/continue_generation")
            reply = pending.result(timeout=HTTP_TIMEOUT_S).json()
        assert reply["meta_info"]["finish_reason"]["type"] == "abort"
        assert reply["meta_info"]["completion_tokens"] < 200
    finally:
        post(engine, "/continue_generation")


def test_released_memory_refuses_generation_until_resumed(engine: EngineProcess) -> None:
    released = post(engine, "/release_memory_occupation", {})
    assert released.status_code == 200 and released.json() is None  # SGLang's handler returns nothing
    states = get(engine, "/server_info").json()["internal_states"][0]
    assert states["released_memory"] == ["cuda_graph", "kv_cache", "weights"]
    assert get(engine, "/ready").status_code == 503
    try:
        reply = post(engine, "/generate", {"text": "x"})
        assert reply.status_code == 503 and "/resume_memory_occupation" in reply.json()["error"]["message"]
        assert get(engine, "/health_generate").status_code == 503
    finally:
        assert post(engine, "/resume_memory_occupation", {"tags": None}).status_code == 200
    again = post(engine, "/resume_memory_occupation", {"tags": ["weights"]})
    assert again.status_code == 400 and "was not released" in again.json()["message"]
    assert get(engine, "/ready").status_code == 200
    assert greedy(engine, n=2)["meta_info"]["completion_tokens"] == 2
