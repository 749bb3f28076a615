"""The CPU engine and our weight sync against SGLang 0.5.23's own source: one case per request/response shape.

Sources (read from the unpacked wheel, see tests/actors/sglang_source.py): ``srt/managers/io_struct.py``
(request models), ``srt/sampling/sampling_params.py``, ``srt/entrypoints/http_server.py`` (routes, bodies,
statuses), ``srt/managers/tokenizer_manager.py`` (context check, n > 1, logprob shapes),
``srt/managers/scheduler_components/logprob_result_processor.py`` (input logprobs start with None),
``srt/managers/scheduler_components/weight_updater.py`` (begin/end sessions, memory tags),
``srt/utils/common.py`` ``init_custom_process_group`` (run as written), ``srt/mem_cache/radix_cache.py``,
``scheduler_components/flush_wrapper.py``, ``srt/observability/metrics_collector.py`` and ``func_timer.py``. The
OpenAI-compatible API has its own module, tests/actors/test_sglang_openai.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any

import pytest
import requests
import torch

from actors.cpu_engine import io_struct
from actors.weights_group import WeightsGroup
from tests.actors import sglang_source
from tests.actors.conftest import REPO_ROOT, free_port
from tests.actors.sglang_engine import (
    GREEDY,
    MODEL,
    TIMEOUT_S,
    generate,
    get,
    hold_a_running_stream,
    post,
    start_engine,
)

if TYPE_CHECKING:
    from tests.actors.conftest import EngineLauncher, EngineProcess

IO = "srt/managers/io_struct.py"


@pytest.fixture(scope="module")
def engine(spawn_module_engine: EngineLauncher) -> EngineProcess:
    return start_engine(spawn_module_engine)


# ---- request models: every field SGLang declares, we declare ---------------------------------------------


@pytest.mark.parametrize(
    ("ours", "theirs", "file"),
    [
        (io_struct.UpdateWeightsFromTensorReqInput, "UpdateWeightsFromTensorReqInput", IO),
        (io_struct.UpdateWeightFromDiskReqInput, "UpdateWeightFromDiskReqInput", IO),
        (io_struct.InitWeightsUpdateGroupReqInput, "InitWeightsUpdateGroupReqInput", IO),
        (io_struct.UpdateWeightsFromDistributedReqInput, "UpdateWeightsFromDistributedReqInput", IO),
        (io_struct.DestroyWeightsUpdateGroupReqInput, "DestroyWeightsUpdateGroupReqInput", IO),
        (io_struct.BeginWeightUpdateReqInput, "BeginWeightUpdateReqInput", IO),
        (io_struct.EndWeightUpdateReqInput, "EndWeightUpdateReqInput", IO),
        (io_struct.UpdateWeightVersionReqInput, "UpdateWeightVersionReqInput", IO),
        (io_struct.GetWeightsByNameReqInput, "GetWeightsByNameReqInput", IO),
        (io_struct.MemoryOccupationReqInput, "ReleaseMemoryOccupationReqInput", IO),
        (io_struct.MemoryOccupationReqInput, "ResumeMemoryOccupationReqInput", IO),
        (io_struct.PauseGenerationReqInput, "PauseGenerationReqInput", IO),
        (io_struct.ContinueGenerationReqInput, "ContinueGenerationReqInput", IO),
        (io_struct.AbortReq, "AbortReq", IO),
    ],
)
def test_request_models_declare_every_sglang_field(ours: type, theirs: str, file: str) -> None:
    """``io_struct.py``: each ``*ReqInput`` field (and BaseReq's ``rid``/``http_worker_ipc``) is accepted."""
    assert sglang_source.class_fields(file, theirs) <= set(ours.model_fields)


def test_generate_and_sampling_fields_are_all_known() -> None:
    """``io_struct.GenerateReqInput`` and ``sampling_params.SamplingParams``: no SGLang field is refused as unknown."""
    generate_fields = sglang_source.class_fields(IO, "GenerateReqInput")
    known = set(io_struct.GenerateReqInput.model_fields) | set(io_struct.UNSUPPORTED_GENERATE_FIELDS)
    assert generate_fields <= known, generate_fields - known
    source = sglang_source.read("srt/sampling/sampling_params.py")
    api = source[source.index("# --- API parameters") : source.index("# --- Internal fields")]
    names = {line.split(":")[0].strip() for line in api.splitlines() if line.startswith("    ") and ": " in line}
    names = {name for name in names if name.isidentifier()}
    assert "max_new_tokens" in names and "logit_bias" in names
    assert names <= set(io_struct.SamplingParams.model_fields), names - set(io_struct.SamplingParams.model_fields)


@pytest.mark.processes
def test_every_sglang_field_goes_through_http(engine: EngineProcess) -> None:
    """A body with every SGLang field at its default is accepted by each update endpoint (http_server.py)."""
    assert post(engine, "/begin_weight_update", {"selector": "all", "rid": None, "http_worker_ipc": None}).ok
    version = {"new_version": "v-conf", "abort_all_requests": True, "rid": None}
    assert post(engine, "/update_weight_version", version).json() == {
        "success": True,
        "message": "Weight version updated to v-conf",
        "new_version": "v-conf",
    }
    tensor = {"serialized_named_tensors": [_payload()], "load_format": None, "flush_cache": True}
    tensor |= {"abort_all_requests": False, "weight_version": None, "selector": "target", "torch_empty_cache": False}
    assert post(engine, "/update_weights_from_tensor", tensor).json() == {"success": True, "message": "Success"}
    assert post(engine, "/end_weight_update", {}).json() == {"success": True, "message": "Success"}
    assert get(engine, "/model_info").json()["weight_version"] == "v-conf"


def _payload() -> str:
    from actors.weights_wire import encode_named_tensors

    return encode_named_tensors([("model.norm.weight", torch.ones(MODEL.hidden_size))])


@pytest.mark.processes
def test_tensor_and_distributed_updates_need_a_session(engine: EngineProcess) -> None:
    """weight_updater.py: updates outside begin/end fail (400, success false); end without begin fails."""
    reply = post(engine, "/update_weights_from_tensor", {"serialized_named_tensors": [_payload()]})
    assert reply.status_code == 400 and reply.json()["success"] is False
    assert "between begin_weight_update() and end_weight_update()" in reply.json()["message"]
    assert post(engine, "/end_weight_update", {}).status_code == 400
    assert post(engine, "/begin_weight_update", {}).ok
    assert "already open" in post(engine, "/begin_weight_update", {}).json()["message"]
    assert post(engine, "/end_weight_update", {}).ok


# ---- /generate -------------------------------------------------------------------------------------------


@pytest.mark.processes
def test_input_logprobs_follow_logprob_start_len(engine: EngineProcess) -> None:
    """logprob_result_processor.py: tokens from logprob_start_len, the first with a None logprob; -1: none."""
    ids = [256, 10, 20, 30, 40, 50]
    out = generate(engine, input_ids=ids, sampling_params=GREEDY, return_logprob=True, logprob_start_len=2)
    entries = out["meta_info"]["input_token_logprobs"]
    assert [e[1] for e in entries] == ids[2:] and entries[0][0] is None
    assert all(e[0] <= 0 for e in entries[1:])
    full = generate(engine, input_ids=ids, sampling_params=GREEDY, return_logprob=True, logprob_start_len=0)
    assert full["meta_info"]["input_token_logprobs"][0] == [None, 256, None]
    assert [e[0] for e in full["meta_info"]["input_token_logprobs"][3:]] == pytest.approx([e[0] for e in entries[1:]])
    none = generate(engine, input_ids=ids, sampling_params=GREEDY, return_logprob=True)
    assert none["meta_info"]["input_token_logprobs"] == []


@pytest.mark.processes
def test_top_logprobs(engine: EngineProcess) -> None:
    """tokenizer_manager.py: output/input_top_logprobs hold ``top_logprobs_num`` [logprob, id, text] per token."""
    out = generate(
        engine, text="hi", sampling_params=GREEDY, return_logprob=True, top_logprobs_num=3, logprob_start_len=0,
        return_text_in_logprobs=True,
    )  # fmt: skip
    meta = out["meta_info"]
    assert len(meta["output_top_logprobs"]) == 6 and all(len(top) == 3 for top in meta["output_top_logprobs"])
    for chosen, top in zip(meta["output_token_logprobs"], meta["output_top_logprobs"], strict=True):
        assert top[0][1] == chosen[1] and top[0][0] == pytest.approx(chosen[0])  # greedy takes the top token
        assert top[0][0] >= top[1][0] >= top[2][0] and isinstance(top[0][2], str)
    assert meta["input_top_logprobs"][0] is None and len(meta["input_top_logprobs"][1]) == 3


@pytest.mark.processes
def test_n_samples_prompt_major(engine: EngineProcess) -> None:
    """tokenizer_manager.py: n > 1 returns a list, n per prompt in prompt order, each with its own rid."""
    params = {"n": 3, "temperature": 1.0, "max_new_tokens": 5, "ignore_eos": True, "sampling_seed": 1}
    out = generate(engine, text=["ab", "cdef"], sampling_params=params)
    assert [o["meta_info"]["prompt_tokens"] for o in out] == [3, 3, 3, 5, 5, 5]
    assert len({o["meta_info"]["id"] for o in out}) == 6
    single = generate(engine, text="ab", sampling_params=params)
    assert isinstance(single, list) and len(single) == 3


@pytest.mark.processes
def test_stream_sends_sse_chunks_then_done(engine: EngineProcess) -> None:
    """http_server.py: ``data: {...}`` events (cumulative output), the last finished, then ``data: [DONE]``."""
    body = {"text": "stream me", "sampling_params": {**GREEDY, "max_new_tokens": 5}, "stream": True}
    with requests.post(engine.url + "/generate", json=body, stream=True, timeout=TIMEOUT_S) as reply:
        assert reply.headers["Content-Type"].startswith("text/event-stream")
        lines = [line for line in reply.iter_lines() if line]
    assert lines[-1] == b"data: [DONE]"
    events = [json.loads(line.removeprefix(b"data: ")) for line in lines[:-1]]
    assert len(events) >= 2 and events[-1]["meta_info"]["finish_reason"]["type"] == "length"
    counts = [len(e["output_ids"]) for e in events]
    assert counts == sorted(counts) and counts[-1] == 5
    plain = generate(engine, text="stream me", sampling_params={**GREEDY, "max_new_tokens": 5})
    assert events[-1]["output_ids"] == plain["output_ids"] and events[-1]["text"] == plain["text"]


@pytest.mark.processes
def test_logit_bias_and_penalties_change_sampling(engine: EngineProcess) -> None:
    """sampling_params.py / penaltylib: logit_bias forces a token; penalties steer away from repeats."""
    forced = generate(engine, text="x", sampling_params={**GREEDY, "logit_bias": {"65": 100.0}})
    assert forced["output_ids"] == [65] * 6
    for penalty, bias in (({"frequency_penalty": 2.0}, 7.0), ({"presence_penalty": 2.0}, 1.0)):
        biased = {**GREEDY, "max_new_tokens": 20, "logit_bias": {"65": bias}}
        assert generate(engine, text="x", sampling_params=biased)["output_ids"] == [65] * 20
        ids = generate(engine, text="x", sampling_params={**biased, **penalty})["output_ids"]
        assert ids[0] == 65 and ids.count(65) < 20, (penalty, ids)
    plain = generate(engine, text="x", sampling_params={**GREEDY, "max_new_tokens": 30})["output_ids"]
    damped = generate(engine, text="x", sampling_params={**GREEDY, "max_new_tokens": 30, "repetition_penalty": 2.0})
    assert damped["output_ids"] != plain


@pytest.mark.processes
def test_context_overflow_is_a_400_with_sglangs_message(engine: EngineProcess) -> None:
    """tokenizer_manager._validate_one_request: prompt + max_new_tokens over the context length."""
    reply = post(engine, "/generate", {"input_ids": [1] * 100, "sampling_params": {"max_new_tokens": 29}})
    assert reply.status_code == 400
    assert "Requested token count exceeds the model's maximum context length of 128 tokens" in reply.text
    assert post(engine, "/generate", {"input_ids": [1] * 100, "sampling_params": {"max_new_tokens": 28}}).ok


@pytest.mark.processes
def test_prefix_cache_reports_cached_tokens_and_flushes(engine: EngineProcess) -> None:
    """A repeated prompt reuses its cached prefix (cached_tokens, same output); /flush_cache empties it."""
    assert post(engine, "/flush_cache").status_code == 200
    prompt = [256, *range(40, 70)]
    first = generate(engine, input_ids=prompt, sampling_params=GREEDY)
    assert first["meta_info"]["cached_tokens"] == 0
    again = generate(engine, input_ids=prompt, sampling_params=GREEDY)
    assert again["meta_info"]["cached_tokens"] == len(prompt) - 1 and again["output_ids"] == first["output_ids"]
    longer = generate(engine, input_ids=[*prompt, 7, 8], sampling_params=GREEDY)
    assert longer["meta_info"]["cached_tokens"] == len(prompt)
    assert post(engine, "/flush_cache").text.startswith("Cache flushed.")
    assert generate(engine, input_ids=prompt, sampling_params=GREEDY)["meta_info"]["cached_tokens"] == 0


@pytest.mark.processes
def test_radix_cache_matches_generated_tokens_and_branches(engine: EngineProcess) -> None:
    """mem_cache/radix_cache.py ``match_prefix``/``insert``, mem_cache/common.py ``release_kv_cache`` (a finished
    request leaves prompt + output but the last token, whose KV was never computed), schedule_batch.py
    ``_compute_max_prefix_len`` (at most len - 1, and not past logprob_start_len); n > 1 samples find their
    prompt cached (tokenizer_manager._handle_batch_request prefills it once first)."""
    assert post(engine, "/flush_cache").status_code == 200
    prompt = [256, *range(80, 100)]
    first = generate(engine, input_ids=prompt, sampling_params=GREEDY)
    output = first["output_ids"]
    turn = generate(engine, input_ids=[*prompt, *output, 65, 66], sampling_params=GREEDY)
    assert turn["meta_info"]["cached_tokens"] == len(prompt) + len(output) - 1
    resumed = generate(engine, input_ids=[*prompt, *output], sampling_params=GREEDY)
    assert resumed["meta_info"]["cached_tokens"] == len(prompt) + len(output) - 1  # = len - 1: one token to compute
    branch = generate(engine, input_ids=[*prompt[:12], 1, 2, 3], sampling_params=GREEDY)
    assert branch["meta_info"]["cached_tokens"] == 12
    scored = {"return_logprob": True, "logprob_start_len": 5, "sampling_params": {**GREEDY, "max_new_tokens": 0}}
    rescore = generate(engine, input_ids=prompt, **scored)
    assert rescore["meta_info"]["cached_tokens"] == 5 and rescore["output_ids"] == []
    assert [e[1] for e in rescore["meta_info"]["input_token_logprobs"]] == prompt[5:]  # prefill-only still scores
    assert post(engine, "/flush_cache").status_code == 200
    samples = generate(engine, input_ids=[256, 5, 6, 7, 8], sampling_params={**GREEDY, "n": 2})
    assert [s["meta_info"]["cached_tokens"] for s in samples] == [4, 4]


@pytest.mark.processes
def test_flush_cache_is_refused_while_requests_run(engine: EngineProcess) -> None:
    """http_server.py ``flush_cache`` (400 with the scheduler's message), scheduler.py ``flush_cache`` (only when
    ``is_fully_idle``), scheduler_components/flush_wrapper.py (``?timeout=`` waits for idle, then gives up)."""
    body = {"input_ids": [256, 1, 2], "rid": "held", "sampling_params": {**GREEDY, "max_new_tokens": 100}}
    reply, lines = hold_a_running_stream(engine, "/generate", body)
    try:
        refused = post(engine, "/flush_cache")
        assert (refused.status_code, refused.text) == (400, "Flush cache failed.\n")
        waited = requests.post(engine.url + "/flush_cache?timeout=0.3", timeout=TIMEOUT_S)
        assert (waited.status_code, waited.text) == (400, "Timed out waiting for idle state.")
        assert post(engine, "/abort_request", {"rid": "held"}).status_code == 200
    finally:
        post(engine, "/continue_generation", {})
        events = [json.loads(line.removeprefix(b"data: ")) for line in lines if line and line != b"data: [DONE]"]
        reply.close()
    assert events[-1]["meta_info"]["finish_reason"]["type"] == "abort"
    assert set(events[-1]["meta_info"]["finish_reason"]) == {"type", "message", "status_code", "err_type"}
    assert requests.post(engine.url + "/flush_cache?timeout=5", timeout=TIMEOUT_S).status_code == 200
    assert requests.get(engine.url + "/flush_cache?timeout=-1", timeout=TIMEOUT_S).status_code == 400


@pytest.mark.processes
def test_a_weight_update_that_cannot_flush_fails_after_loading(engine: EngineProcess) -> None:
    """scheduler_components/weight_updater.py ``flush_cache_after_weight_update``: with ``flush_cache`` and requests
    still running (here frozen by an in-place pause) the weights load and the version moves, but the call fails
    (400, success false, its message); without ``flush_cache`` the same update succeeds."""
    body = {"input_ids": [256, 1, 2], "rid": "held-2", "sampling_params": {**GREEDY, "max_new_tokens": 100}}
    reply, lines = hold_a_running_stream(engine, "/generate", body)
    try:
        assert post(engine, "/begin_weight_update", {}).ok
        update = {"serialized_named_tensors": [_payload()], "flush_cache": True, "weight_version": "v-held"}
        refused = post(engine, "/update_weights_from_tensor", update)
        assert refused.status_code == 400 and refused.json()["success"] is False
        assert refused.json()["message"].startswith("Weights were updated, but the cache was not flushed because")
        assert get(engine, "/model_info").json()["weight_version"] == "v-held"
        quiet = post(engine, "/update_weights_from_tensor", {**update, "flush_cache": False, "weight_version": "v2"})
        assert quiet.json() == {"success": True, "message": "Success"}
        assert post(engine, "/end_weight_update", {}).ok
        assert post(engine, "/abort_request", {"rid": "held-2"}).status_code == 200
    finally:
        post(engine, "/continue_generation", {})
        list(lines)
        reply.close()


# ---- server state endpoints --------------------------------------------------------------------------------


@pytest.mark.processes
def test_server_info_metrics_and_control_bodies(engine: EngineProcess) -> None:
    """http_server.py bodies of pause/continue/abort/ready; server_info max_total_num_tokens; metrics series."""
    assert isinstance(get(engine, "/server_info").json()["max_total_num_tokens"], int)
    paused = post(engine, "/pause_generation", {"mode": "in_place"})
    assert paused.json() == {"message": "Generation paused successfully.", "status": "ok"}
    assert get(engine, "/ready").status_code == 503
    resumed = post(engine, "/continue_generation", {"torch_empty_cache": True})
    assert resumed.json() == {"message": "Generation continued successfully.", "status": "ok"}
    assert get(engine, "/ready").status_code == 200
    aborted = post(engine, "/abort_request", {"rid": "nothing-running"})
    assert aborted.status_code == 200 and aborted.content == b""
    weights = post(engine, "/get_weights_by_name", {"name": "model.norm.weight", "truncate_size": 2}).json()
    assert len(weights) == 2 and all(isinstance(w, float) for w in weights)
    text = get(engine, "/metrics").text
    for series in ("sglang:token_usage", "sglang:cache_hit_rate", "sglang:func_latency_seconds_bucket"):
        assert series + "{" in text, series
    for series in ("sglang:time_to_first_token_seconds", "sglang:time_per_output_token_seconds"):
        assert series + '_count{model_name="tiny"}' in text, series


# ---- weight-update group: SGLang's own init_custom_process_group on the other side ---------------------------


def _rank(role: str, port: int, rank: int, group: str, spec: list[Any]) -> subprocess.Popen[str]:
    argv = [sys.executable, str(REPO_ROOT / "tests/actors/sglang_source.py"), role, "127.0.0.1", str(port)]
    argv += [str(rank), "2", group, json.dumps(spec)]
    return subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.processes
def test_our_trainer_rank_reaches_an_sglang_engine_rank() -> None:
    """weight_updater.py: the engine joins with SGLang's init_custom_process_group as rank_offset + tp_rank."""
    port = free_port()
    spec = [["a", "float32", [4, 3], 1.5], ["b", "bfloat16", [5], -2.0]]
    proc = _rank("receive", port, 1, "weight_update_group", spec)
    try:
        group = WeightsGroup(
            master_address="127.0.0.1", master_port=port, rank=0, world_size=2,
            group_name="weight_update_group", backend="gloo", timeout_s=30,
        )  # fmt: skip
        for _, dtype, shape, fill in spec:
            group.broadcast(torch.full(shape, fill, dtype=getattr(torch, dtype)))
        group.close()
        out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out) == {"a": 18.0, "b": -10.0}


@pytest.mark.processes
def test_an_sglang_trainer_rank_reaches_the_cpu_engine(engine: EngineProcess) -> None:
    """miles' trainer builds rank 0 with SGLang's function; the CPU engine joins and loads what it sends."""
    port = free_port()
    spec = [["model.norm.weight", "float32", [MODEL.hidden_size], 3.0]]
    proc = _rank("send", port, 0, "miles_group", spec)
    try:
        init = {"master_address": "127.0.0.1", "master_port": port, "rank_offset": 1, "world_size": 2}
        reply = post(engine, "/init_weights_update_group", {**init, "group_name": "miles_group", "backend": "gloo"})
        assert reply.json() == {"success": True, "message": "Succeeded to initialize custom process group."}
        assert post(engine, "/begin_weight_update", {"selector": "all"}).ok
        meta = {"names": ["model.norm.weight"], "dtypes": ["float32"], "shapes": [[MODEL.hidden_size]]}
        update = threading.Thread(target=lambda: _check_ok(post(engine, "/update_weights_from_distributed", {
            **meta, "group_name": "miles_group", "weight_version": "v-miles", "selector": "all"})))  # fmt: skip
        update.start()
        _, err = proc.communicate(timeout=TIMEOUT_S)
        update.join(TIMEOUT_S)
        assert post(engine, "/end_weight_update", {}).ok
        assert proc.returncode == 0, err
    finally:
        proc.kill()
        post(engine, "/destroy_weights_update_group", {"group_name": "miles_group"})
    assert post(engine, "/get_weights_by_name", {"name": "model.norm.weight", "truncate_size": 2}).json() == [3.0, 3.0]
    assert get(engine, "/model_info").json()["weight_version"] == "v-miles"


def _check_ok(reply: requests.Response) -> None:
    assert reply.json() == {"success": True, "message": "Succeeded to update parameter online."}, reply.text
