"""Weight versions per token and updates while requests run, against SGLang 0.5.23's own source.

Mirrors ``srt/utils/weight_versions.py`` (``compute_weight_version_spans``, ``add_weight_versions_to_meta_info``,
run here from the unpacked wheel), ``srt/managers/scheduler.py`` ``record_weight_version_change`` and
``srt/managers/tokenizer_manager.py`` ``update_weights_from_disk`` (``abort_all_requests`` aborts, then the
update takes ``model_update_lock.writer_lock``, so the aborted requests end before the load and the flush).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests
import torch

from actors.cpu_engine import build_model
from tests.actors import sglang_source
from tests.actors.sglang_engine import GREEDY, MODEL, TIMEOUT_S, get, hold_a_running_stream, post, start_engine

pytestmark = pytest.mark.processes

if TYPE_CHECKING:
    from tests.actors.conftest import EngineLauncher, EngineProcess

WV = "srt/utils/weight_versions.py"


@pytest.fixture(scope="module")
def engine(spawn_module_engine: EngineLauncher) -> EngineProcess:
    return start_engine(spawn_module_engine)


@dataclass
class _Span:  # WeightVersionSpan without msgspec
    version: str
    start: int
    end: int


@dataclass(frozen=True)
class _Event:  # WeightVersionEvent
    old_version: str
    num_output_tokens: int


def sglang_meta(events: list[tuple[str, int]], current: str, num_tokens: int) -> dict[str, Any]:
    """What SGLang puts in meta_info for a finished request with these version events."""
    compute = sglang_source.load_function(WV, "compute_weight_version_spans", {"WeightVersionSpan": _Span})
    add = sglang_source.load_function(WV, "add_weight_versions_to_meta_info", {})
    spans = compute([_Event(v, n) for v, n in events], current_version=current, num_output_tokens=num_tokens)
    meta: dict[str, Any] = {}
    add(meta, spans, num_output_tokens=num_tokens)
    return meta


def _events(lines: Any) -> list[dict[str, Any]]:
    return [json.loads(line.removeprefix(b"data: ")) for line in lines if line and line != b"data: [DONE]"]


def test_a_version_change_mid_request_splits_its_tokens_into_spans(engine: EngineProcess) -> None:
    """scheduler.py ``record_weight_version_change``: a running request keeps the old version for the tokens it
    had; its final meta_info carries the spans exactly as SGLang computes them from those events."""
    before = get(engine, "/model_info").json()["weight_version"]
    body = {"input_ids": [256, 5, 6], "rid": "spans", "sampling_params": {**GREEDY, "max_new_tokens": 40}}
    reply, lines = hold_a_running_stream(engine, "/generate", body)
    try:
        changed = post(engine, "/update_weight_version", {"new_version": "v-spans", "abort_all_requests": False})
        assert changed.json() == {"success": True, "message": "Weight version updated to v-spans",
                                  "new_version": "v-spans"}  # fmt: skip
    finally:
        assert post(engine, "/continue_generation", {}).ok
        events = _events(lines)
        reply.close()
    final = events[-1]["meta_info"]
    assert final["finish_reason"]["type"] == "length" and final["completion_tokens"] == 40
    spans = final["weight_versions"]
    assert [s["version"] for s in spans] == [before, "v-spans"]
    cut = spans[0]["end"]
    assert 0 < cut < 40
    expected = sglang_meta([(before, cut)], "v-spans", 40)
    assert {"weight_versions": spans, "weight_version": final["weight_version"]} == expected
    assert "weight_versions" not in events[0]["meta_info"]  # unfinished chunks carry none (output_streamer.py)
    one = post(engine, "/generate", {"input_ids": [256, 7], "sampling_params": GREEDY}).json()["meta_info"]
    assert (
        one["weight_versions"]
        == [{"version": "v-spans", "start": 0, "end": 6}]
        == sglang_meta([], "v-spans", 6)["weight_versions"]
    )


def test_update_from_disk_with_abort_all_requests_succeeds_while_requests_run(
    engine: EngineProcess, tmp_path: Path
) -> None:
    """tokenizer_manager.py ``update_weights_from_disk``: ``abort_all_requests`` aborts what runs, the writer lock
    waits for those requests to end, then the weights load and the cache is flushed: 200, success true. (Our
    engine answered 400 "the cache was not flushed because requests are still running" here.)"""
    torch.save(build_model(MODEL).state_dict(), tmp_path / "pytorch_model.bin")
    body = {"input_ids": [256, 1, 2], "rid": "busy", "sampling_params": {**GREEDY, "max_new_tokens": 100}}
    reply = requests.post(engine.url + "/generate", json={**body, "stream": True}, stream=True, timeout=TIMEOUT_S)
    lines = reply.iter_lines()
    first = next(line for line in lines if line)  # running, not paused
    update = {"model_path": str(tmp_path), "abort_all_requests": True, "flush_cache": True, "weight_version": "v-d"}
    answer = post(engine, "/update_weights_from_disk", update)
    events = _events([first, *lines])
    reply.close()
    assert answer.status_code == 200, answer.text
    assert answer.json()["success"] is True
    assert events[-1]["meta_info"]["finish_reason"]["type"] == "abort"
    assert events[-1]["meta_info"]["completion_tokens"] < 100
    assert get(engine, "/model_info").json()["weight_version"] == "v-d"
    after = post(engine, "/generate", {"input_ids": [256, 1, 2], "sampling_params": GREEDY}).json()
    assert after["meta_info"]["weight_version"] == "v-d" and after["meta_info"]["cached_tokens"] == 0  # flushed
