"""Weight updates under SGLang 0.5.23's ``retract`` and ``in_place`` pause modes, on the CPU engine and through the
controller and the asynchronous rollout.

Mirrors SGLang 0.5.23's ``srt/managers/scheduler.py``: ``pause_generation(mode="retract")`` moves the running
requests to the waiting queue and frees their KV (``retract_all``), so they are prefilled again, under the new
weights, on ``continue_generation``; ``mode="in_place"`` leaves the running batch as it is (KV kept).
``flush_cache`` runs only when ``is_fully_idle(ignore_waiting=self._engine_paused)``: after a retract nothing runs
and the waiting queue is ignored, so it succeeds; under ``in_place`` the batch still runs and the flush is refused,
which is why miles' ``weight_push_session`` (``miles/backends/.../update_weight`` helpers: ``if mode !=
"in_place": flush_cache``) skips the flush there and the update goes with ``flush_cache=False``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests
import torch
from inference_fixtures import CALL_TIMEOUT_S, kill_and_wait_gone, running_controller

from actors.cpu_engine import build_model
from actors.cpu_engine.generation import Sequence, run_batch
from actors.cpu_engine.protocol import GenerationItem, SamplingParams
from actors.rollout.async_executor import AsyncRolloutExecutor
from actors.rollout.staleness import version_number
from runtime import ActorHandle, spawn
from tests.actors.sglang_engine import MODEL, TIMEOUT_S, get, post, start_engine

pytestmark = pytest.mark.processes

if TYPE_CHECKING:
    from tests.actors.conftest import EngineLauncher, EngineProcess

PROMPT = [256, 5, 6, 7]
N = 60
NEW = MODEL.model_copy(update={"seed": 8})


@pytest.fixture(scope="module")
def engine(spawn_module_engine: EngineLauncher) -> EngineProcess:
    return start_engine(spawn_module_engine)


def state_of(config: Any) -> dict[str, torch.Tensor]:
    return dict(build_model(config).state_dict())


def greedy(state: dict[str, torch.Tensor], prompt: list[int], n: int, swap_after: int = 0,
           swap_to: dict[str, torch.Tensor] | None = None) -> list[int]:  # fmt: skip
    """Greedy tokens computed here; ``swap_to`` is loaded between steps once ``swap_after`` tokens exist, the KV
    kept (what an in-place update does)."""
    model = build_model(MODEL)
    model.load_state_dict(state)
    item = GenerationItem(rid="ref", input_ids=prompt, params=SamplingParams(max_new_tokens=n, temperature=0.0,
                          ignore_eos=True), return_logprob=False, logprob_text=False)  # fmt: skip
    seq = Sequence(item=item, generator=torch.Generator().manual_seed(0), max_new_tokens=n)

    def before_step(live: list[Sequence]) -> None:
        if swap_to is not None and len(seq.output_ids) == swap_after:
            model.load_state_dict(swap_to)

    run_batch(model, [seq], model_lock=threading.Lock(), before_step=before_step)
    return seq.output_ids


def save(state: dict[str, torch.Tensor], where: Path) -> str:
    where.mkdir(parents=True, exist_ok=True)
    torch.save(state, where / "pytorch_model.bin")
    return str(where)


@pytest.mark.parametrize("mode", ["retract", "in_place"])
def test_an_update_during_a_pause_recomputes_retracted_requests_and_keeps_in_place_ones(
    engine: EngineProcess, tmp_path: Path, mode: str
) -> None:
    old, new = state_of(MODEL), state_of(NEW)
    load = {"model_path": save(old, tmp_path / "old"), "flush_cache": True, "weight_version": f"old-{mode}"}
    assert post(engine, "/update_weights_from_disk", load).json()["success"] is True
    body = {"input_ids": PROMPT, "rid": f"span-{mode}", "stream": True,
            "sampling_params": {"temperature": 0, "max_new_tokens": N, "ignore_eos": True}}  # fmt: skip
    reply = requests.post(engine.url + "/generate", json=body, stream=True, timeout=TIMEOUT_S)
    try:
        lines = reply.iter_lines()
        next(line for line in lines if line)  # running
        assert post(engine, "/pause_generation", {"mode": mode}).ok
        flushed = requests.post(engine.url + "/flush_cache", timeout=TIMEOUT_S)
        assert flushed.status_code == (200 if mode == "retract" else 400), flushed.text  # is_fully_idle(...)
        update = {"model_path": save(new, tmp_path / "new"), "flush_cache": mode == "retract",
                  "weight_version": f"new-{mode}"}  # fmt: skip
        answer = post(engine, "/update_weights_from_disk", update)
        assert answer.status_code == 200 and answer.json()["success"] is True, answer.text
        assert post(engine, "/continue_generation", {}).ok
        events = [json.loads(line.removeprefix(b"data: ")) for line in lines if line and line != b"data: [DONE]"]
    finally:
        reply.close()
    final = events[-1]
    spans = final["meta_info"]["weight_versions"]
    assert [s["version"] for s in spans] == [f"old-{mode}", f"new-{mode}"], spans
    cut, tokens = spans[0]["end"], final["output_ids"]
    assert 0 < cut < N and len(tokens) == N
    assert tokens[:cut] == greedy(old, PROMPT, cut)
    if mode == "retract":  # recomputed: exactly what the new weights make of prompt + the tokens so far
        assert tokens[cut:] == greedy(new, PROMPT + tokens[:cut], N - cut)
    else:  # the old KV kept, the new weights from the cut on
        assert tokens == greedy(old, PROMPT, N, swap_after=cut, swap_to=new)
        assert tokens[cut:] != greedy(new, PROMPT + tokens[:cut], N - cut)
    assert get(engine, "/model_info").json()["weight_version"] == f"new-{mode}"


@pytest.fixture(params=["retract", "in_place"])
def paused_rollout(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ActorHandle, ActorHandle]]:
    mode = request.param
    with running_controller(f"pm-{mode}", str(tmp_path), num_engines=1, pause_mode=mode,
                            initial_weight_version="v0") as controller:  # fmt: skip
        kwargs = {"controller": controller, "reward_fn": "inference_fixtures:parity_reward", "dp_size": 1,
                  "sampling_params": {"temperature": 1.0, "max_new_tokens": 48, "ignore_eos": True},
                  "max_concurrency": 8, "retry_deadline_s": 60.0, "seed": 4}  # fmt: skip
        rollout = spawn(AsyncRolloutExecutor, kwargs=kwargs)
        try:
            yield controller, rollout
        finally:
            kill_and_wait_gone(rollout)


def pause_a_running_batch(controller: ActorHandle, mode: str, timeout_s: float = 10.0) -> None:
    """Once the engine runs a batch (``sglang:num_running_reqs``), pause it in ``mode`` ahead of the controller's
    own (identical) pause, so the push surely finds requests with tokens from the old version."""
    (url,) = controller.engine_urls().result(10)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = requests.get(url + "/metrics", timeout=10).text
        line = next(line for line in text.splitlines() if line.startswith("sglang:num_running_reqs"))
        if float(line.rsplit(" ", 1)[1]) > 0:
            break
        time.sleep(0.002)
    assert requests.post(url + "/pause_generation", json={"mode": mode}, timeout=10).ok


def test_the_async_rollout_runs_through_pushes_in_retract_and_in_place_modes(
    paused_rollout: tuple[ActorHandle, ActorHandle],
) -> None:
    """The controller pauses in its mode, flushes only when that can succeed, sets the version and continues;
    requests that spanned the push carry both versions; none is aborted, lost or recorded twice."""
    controller, rollout = paused_rollout
    mode = controller.status().result(10)["pause_mode"]
    assert mode in ("retract", "in_place")
    # max_buffered_groups=2: the groups a push finds running are the next batch
    rollout.start_producer(2, 2, max_staleness=1, partial_rollout=False, max_buffered_groups=2).result(30)
    seen: set[tuple[int, int]] = set()
    mixed = 0
    for version in range(3):
        batch = rollout.next_batch(version, 60.0).result(90)
        for shard in (ref.get(timeout=30) for ref in batch["shards"]):
            for group, index, versions in zip(shard["group_ids"], shard["sample_index"],
                                              shard["token_weight_versions"], strict=True):  # fmt: skip
                assert (group, index) not in seen
                seen.add((group, index))
                numbers = [version_number(v) for v in versions]
                assert len(numbers) == 48 and numbers == sorted(numbers)
                mixed += len(set(numbers)) > 1
        if version < 2:
            pause_a_running_batch(controller, mode)
            rollout.updating_weights().result(10)
            token = controller.start_update_weights().result(CALL_TIMEOUT_S)["token"]
            controller.end_update_weights(token, f"v{version + 1}").result(CALL_TIMEOUT_S)
            rollout.set_version(version + 1).result(10)
    stats = rollout.stop_producer().result(30)
    assert stats["samples_lost"] == 0 and stats["samples_retried"] == 0, stats  # nothing aborted
    assert mixed > 0, "no sample spans two versions: the pushes found no request running"
