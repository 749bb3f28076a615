"""Fully asynchronous rollout as real actors: a producer through a real controller, router and CPU engines.

Mirrors miles' fully async rollout (``miles/rollout/fully_async_rollout.py``: a producer keeps groups in flight,
the trainer drains whole groups, groups older than ``--max-weight-staleness`` are not trained on), its partial
rollout (aborted requests resumed with their tokens kept) and SGLang 0.5.23's per-token ``weight_versions``
(``srt/utils/weight_versions.py``). The fault cases kill -9 an engine and the router while groups are in
flight (as tests/actors/test_inference_controller.py does) and count every sample: none twice, none lost.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from inference_fixtures import CALL_TIMEOUT_S, in_flight, kill_and_wait_gone, running_controller

from actors.rollout.async_executor import AsyncRolloutExecutor
from actors.rollout.prompt_plan import PromptPlan, sampling_seed
from actors.rollout.samples import DuplicateSample, GroupRecord, SampleBuffer, SampleRecord, token_versions
from actors.rollout.staleness import StalenessBound, version_number
from runtime import ActorHandle, spawn

pytestmark = pytest.mark.processes

SAMPLING = {"temperature": 1.0, "max_new_tokens": 24, "ignore_eos": True}


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ActorHandle]:
    with running_controller("async", str(tmp_path_factory.mktemp("async")), initial_weight_version="v0") as handle:
        yield handle


@pytest.fixture
def rollout(controller: ActorHandle) -> Iterator[ActorHandle]:
    kwargs = {"controller": controller, "reward_fn": "inference_fixtures:parity_reward", "sampling_params": SAMPLING,
              "dp_size": 2, "max_concurrency": 8, "retry_deadline_s": 60.0, "seed": 3}  # fmt: skip
    handle = spawn(AsyncRolloutExecutor, kwargs=kwargs)
    try:
        yield handle
    finally:
        kill_and_wait_gone(handle)


def push(controller: ActorHandle, rollout: ActorHandle, version: int, *, mid_request: bool = True) -> None:
    """A weight update as the async loop does it: pause (abort mode) ... set the version, continue;
    ``mid_request``: first wait until a running request has tokens, so the pause cuts some sample in two."""
    deadline = time.monotonic() + (10 if mid_request else 0)
    urls = controller.engine_urls().result(10)
    while not any(in_flight(url, "num_in_flight_with_output") for url in urls) and time.monotonic() < deadline:
        time.sleep(0.005)
    rollout.updating_weights().result(10)
    token = controller.start_update_weights().result(CALL_TIMEOUT_S)["token"]
    controller.end_update_weights(token, f"v{version}").result(CALL_TIMEOUT_S)
    rollout.set_version(version).result(10)


def samples_of(batch: dict[str, Any]) -> list[tuple[int, int, list[int], list[str]]]:
    """(group id, sample index, response ids, per-token versions) for every sample of a batch."""
    rows = []
    for shard in (ref.get(timeout=30) for ref in batch["shards"]):
        for i, tokens in enumerate(shard["tokens"]):
            response = tokens[len(tokens) - shard["response_lengths"][i] :]
            rows.append((shard["group_ids"][i], shard["sample_index"][i], response, shard["token_weight_versions"][i]))
    return rows


def test_staleness_bound_and_buffer_without_processes() -> None:
    assert version_number("v12") == 12 and version_number("3") == 3
    with pytest.raises(ValueError, match="'default' is not 'v<N>'"):
        version_number("default")
    bound = StalenessBound(1, "drop")
    assert bound.accepts(4, 5) and not bound.accepts(3, 5) and bound.may_start(9, 0)
    wait = StalenessBound(0, "wait")
    assert wait.may_start(2, 2) and not wait.may_start(3, 2)
    buffer = SampleBuffer(bound)
    old = SampleRecord(token_versions=["v1", "v2"])
    buffer.put(GroupRecord(0, [1], [old, SampleRecord(token_versions=["v3"])], [0.0, 1.0]))
    buffer.put(GroupRecord(1, [1], [SampleRecord(token_versions=["v2"])] * 2, [0.0, 1.0]))
    with pytest.raises(DuplicateSample):
        buffer.put(GroupRecord(1, [1], [], []))
    assert buffer.take(1, current_version=3) is not None  # group 0 (oldest v1) is dropped, group 1 taken
    assert buffer.dropped_stale_samples == 2 and buffer.max_staleness_seen == 1 and buffer.groups == []
    meta = {"weight_version": "v2", "weight_versions": [{"version": "v1", "start": 0, "end": 2},
                                                        {"version": "v2", "start": 2, "end": 3}]}  # fmt: skip
    assert token_versions(meta, 3) == ["v1", "v1", "v2"] and token_versions({"weight_version": "v5"}, 2) == ["v5"] * 2


def test_groups_take_the_sync_loops_prompts_and_seeds_and_a_batch_comes_in_group_order() -> None:
    plan = PromptPlan(3, target_len=4, data_seed=7)
    batches = [plan.batch(b) for b in range(3)]
    assert batches[0] != batches[1] != batches[2]  # each batch its own prompts, each a function of (seed, batch)
    assert [plan.group(g) for g in range(9)] == [p for batch in batches for p in batch]
    assert plan.batch(1) == PromptPlan(3, target_len=4, data_seed=7).batch(1) != PromptPlan(3, data_seed=8).batch(1)
    # RolloutExecutor.generate gives sample i of a call seed + i; a group at position k gives the same ones
    seeds = [sampling_seed(5, plan.position(g), 4, j)["sampling_seed"] for g in range(3, 6) for j in range(4)]
    assert seeds == [5 + i for i in range(12)] and sampling_seed(None, 1, 4, 2) == {}
    buffer = SampleBuffer(StalenessBound(0, "wait"))
    for group_id in (2, 0, 1):  # finished out of order
        buffer.put(GroupRecord(group_id, [1], [SampleRecord(token_versions=["v0"])] * 2, [0.0, 1.0]))
    assert [g.group_id for g in buffer.take(3, current_version=0) or []] == [0, 1, 2]


def test_partial_rollouts_keep_each_tokens_version_and_no_sample_twice(
    controller: ActorHandle, rollout: ActorHandle
) -> None:
    rollout.start_producer(2, 2, max_staleness=1, on_stale="drop", partial_rollout=True).result(30)
    seen: set[tuple[int, int]] = set()
    mixed = 0
    # Versions 0..3, a push cutting a running request after each of the first three; then batches at version 3
    # until a sample cut by the last push comes out. On a slow machine the samples the earlier pushes cut may grow
    # too stale and be dropped (as they must), so only the last push's are sure to arrive: the bound keeps them.
    for step in range(9):
        version = min(step, 3)
        batch = rollout.next_batch(version, 60.0).result(90)
        for group, index, response, versions in samples_of(batch):
            assert (group, index) not in seen
            seen.add((group, index))
            assert len(versions) == len(response) == 24  # resumed samples still have the whole budget
            numbers = [version_number(v) for v in versions]
            assert numbers == sorted(numbers) and version - numbers[0] <= 1  # within the bound
            mixed += len(set(numbers)) > 1
        if step < 3:
            push(controller, rollout, step + 1)
        elif step >= 4 and mixed:
            break
    stats = rollout.stop_producer().result(30)
    assert stats["samples_lost"] == 0 and stats["samples_resumed"] > 0, stats
    assert mixed > 0, f"no sample spans two versions although every push cut a running request: {stats}"
    assert stats["max_staleness_seen"] <= 1


def test_max_staleness_zero_waits_like_the_synchronous_loop(controller: ActorHandle, rollout: ActorHandle) -> None:
    start = int(controller.weight_version().result(10).removeprefix("v"))
    rollout.start_producer(2, 2, max_staleness=0, on_stale="wait", version=start).result(30)
    for step in range(2):
        batch = rollout.next_batch(start + step, 60.0).result(90)
        assert {v for *_, versions in samples_of(batch) for v in versions} == {f"v{start + step}"}
        time.sleep(0.3)  # the producer must not start the next batch before the push
        stats = rollout.async_stats().result(10)
        assert stats["groups_in_flight"] == 0 and stats["groups_buffered"] == 0, stats
        push(controller, rollout, start + step + 1, mid_request=False)
    assert rollout.stop_producer().result(30)["samples_dropped_stale"] == 0


def test_kill_9_of_an_engine_and_of_the_router_loses_no_sample(controller: ActorHandle, rollout: ActorHandle) -> None:
    start = int(controller.weight_version().result(10).removeprefix("v"))
    rollout.start_producer(2, 2, max_staleness=2, on_stale="drop", version=start).result(30)
    rollout.next_batch(start, 60.0).result(90)
    victim = controller.cells().result(10)[0]
    deadline = time.monotonic() + 30
    while not in_flight(victim["url"]) and time.monotonic() < deadline:  # it dies with requests in flight
        time.sleep(0.005)
    os.kill(victim["pid"], signal.SIGKILL)
    seen: set[tuple[int, int]] = set()
    router_killed = False
    deadline = time.monotonic() + 120
    while True:  # batches until the retried samples arrived and the engine came back (buffered ones come first)
        for group, index, _, _ in samples_of(rollout.next_batch(start, 60.0).result(90)):
            assert (group, index) not in seen
            seen.add((group, index))
        if not router_killed:
            os.kill(controller.status().result(10)["router_pid"], signal.SIGKILL)
            router_killed = True
            continue
        stats = rollout.async_stats().result(10)
        cell = next(c for c in controller.cells().result(10) if c["id"] == victim["id"])
        if stats["samples_retried"] > 0 and cell["restarts"] >= 1:
            break
        assert time.monotonic() < deadline, (stats, cell)
    assert cell["pid"] != victim["pid"]  # restarted (it waits for the next weights)
    stats = rollout.stop_producer().result(30)
    assert stats["samples_lost"] == 0 and stats["samples_retried"] > 0, stats["lost_errors"]


def test_the_data_position_resumes_with_groups_not_trained_and_skips_trained_ones(
    controller: ActorHandle, rollout: ActorHandle
) -> None:
    start = int(controller.weight_version().result(10).removeprefix("v"))
    rollout.start_producer(1, 2, max_staleness=4, on_stale="drop", version=start, next_group=5,
                           skip_groups=[3, 6, 8]).result(30)  # fmt: skip
    taken = [rollout.next_batch(start, 60.0).result(90)["stats"]["group_ids"][0] for _ in range(3)]
    position = rollout.async_stats().result(10)["data_position"]
    rollout.stop_producer().result(30)
    assert 6 not in taken and 8 not in taken and set(taken) <= {5, 7, 9, 10, 11, 12}, taken
    trained = {g for g in range(5, 13) if g in taken or g in (6, 8)}
    assert position["next_group"] == min(g for g in range(5, 14) if g not in trained)
    assert position["skip_groups"] == sorted(g for g in trained if g > position["next_group"]), (taken, position)
