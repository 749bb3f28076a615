"""The rollout executor as a real actor, generating through a real controller, router and CPU engines."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from inference_fixtures import (
    CALL_TIMEOUT_S,
    in_flight,
    kill_and_wait_gone,
    parity_reward,
    running_controller,
    wait_replaced,
)

from actors import tokenizer
from actors.rollout import (
    RolloutExecutor,
    balanced_ranges,
    group_advantages,
    make_prompts,
    target_sequence_reward,
)
from actors.rollout.router_client import GenerateRefused, generate_once
from runtime import ActorHandle, DeadlineExceeded, ObjectRef, RemoteError, spawn

pytestmark = pytest.mark.processes

SAMPLING = {"temperature": 1.0, "max_new_tokens": 8, "ignore_eos": True}


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ActorHandle]:
    with running_controller("rollout", str(tmp_path_factory.mktemp("rollout"))) as handle:
        yield handle


@pytest.fixture(scope="module")
def executor(controller: ActorHandle) -> Iterator[ActorHandle]:
    handle = spawn(
        RolloutExecutor,
        kwargs={
            "controller": controller,
            "reward_fn": "inference_fixtures:parity_reward",
            "sampling_params": SAMPLING,
            "dp_size": 2,
            "max_concurrency": 8,
            "retry_deadline_s": 60.0,
            "seed": 7,
        },
        name="rollout-executor",
    )
    try:
        yield handle
    finally:
        kill_and_wait_gone(handle)


def fetch(refs: list[Any]) -> list[dict[str, Any]]:
    assert refs and all(isinstance(ref, ObjectRef) for ref in refs)
    return [ref.get(timeout=30) for ref in refs]


def test_advantages_and_rewards_are_group_normalised_and_exact() -> None:
    advantages = group_advantages([1.0, 0.0, 0.5, 0.5, 0.2, 0.2], 2)
    assert advantages[:2] == pytest.approx([1.0, -1.0], abs=1e-5) and advantages[2:] == [0.0] * 4
    assert group_advantages([1.0, 3.0], 2, normalize_std=False) == [-1.0, 1.0]
    with pytest.raises(ValueError, match="groups of 4"):
        group_advantages([1.0] * 6, 4)
    assert [len(r) for r in balanced_ranges(7, 3)] == [3, 2, 2] and balanced_ranges(2, 3)[2] == range(2, 2)
    [prompt] = make_prompts(1, target_len=3, seed=1)
    label, prompt_ids = prompt["label"], tokenizer.encode(prompt["text"])
    assert prompt["text"].startswith("copy ") and label == tokenizer.encode(prompt["text"][5:8], add_bos=False)
    assert target_sequence_reward(prompt_ids, label, label) == 1.0
    assert target_sequence_reward(prompt_ids, [label[0], -1], label) == pytest.approx(1 / 3)
    assert make_prompts(2, seed=4) == make_prompts(2, seed=4) != make_prompts(2, seed=5)


def test_generate_retries_transient_failures_until_its_deadline() -> None:
    """5xx and aborted completions are retried; a 4xx fails at once with the server's message."""
    script = {"flaky": [503, "abort", 200], "refused": [400], "down": [502] * 1000}
    calls: dict[str, int] = defaultdict(int)

    async def handler(request: web.Request) -> web.Response:
        name = request.path.strip("/").split("/")[0]
        step = script[name][min(calls[name], len(script[name]) - 1)]
        calls[name] += 1
        finish = {"type": "abort" if step == "abort" else "length"}
        if step in ("abort", 200):
            return web.json_response({"output_ids": [1, 2], "meta_info": {"finish_reason": finish}})
        return web.json_response({"error": {"message": f"scripted {step}"}}, status=int(step))

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/{name}/generate", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        limit = asyncio.Semaphore(2)
        try:
            async with aiohttp.ClientSession() as session:

                async def call(name: str, deadline_s: float = 5.0) -> Any:
                    return await generate_once(
                        session, f"{base}/{name}", {"input_ids": [1]}, limit=limit,
                        request_timeout_s=2.0, deadline_s=deadline_s, what=f"sample of {name}",
                    )  # fmt: skip

                completion = await call("flaky")
                assert completion.output_ids == [1, 2] and completion.attempts == 3
                with pytest.raises(GenerateRefused, match="HTTP 400: scripted 400"):
                    await call("refused")
                assert calls["refused"] == 1
                started = time.monotonic()
                with pytest.raises(DeadlineExceeded, match=r"sample of down.*HTTP 502"):
                    await call("down", deadline_s=0.5)
                assert time.monotonic() - started < 2.0
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_shards_are_object_refs_with_shapes_rewards_and_zero_sum_advantages(executor: ActorHandle) -> None:
    prompts = make_prompts(3, seed=2)
    result = executor.generate(prompts, 4).result(CALL_TIMEOUT_S)
    shards = fetch(result["shards"])  # fetched by this process, straight from the executor's process
    assert [s["dp_rank"] for s in shards] == [0, 1] and [len(s["tokens"]) for s in shards] == [6, 6]
    groups: dict[int, list[float]] = defaultdict(list)
    for shard in shards:
        for i, tokens in enumerate(shard["tokens"]):
            prompt = tokenizer.encode(prompts[shard["prompt_index"][i]]["text"])  # the executor's byte tokenizer
            response = tokens[len(prompt) :]
            assert tokens[: len(prompt)] == prompt and len(response) == shard["response_lengths"][i] == 8
            assert shard["loss_mask"][i] == [0] * len(prompt) + [1] * 8
            assert len(shard["rollout_logprobs"][i]) == 8 and all(lp <= 0 for lp in shard["rollout_logprobs"][i])
            assert shard["rewards"][i] == parity_reward(prompt, response, None)
            groups[shard["prompt_index"][i]].append(shard["advantages"][i])
    assert sorted(groups) == [0, 1, 2] and all(len(g) == 4 for g in groups.values())
    for advantages in groups.values():
        assert abs(sum(advantages)) < 1e-4
        spread = math.sqrt(sum(a * a for a in advantages) / 4)
        assert spread == pytest.approx(1.0, abs=1e-3) or spread == 0.0
    assert any(a != 0 for g in groups.values() for a in g), "sampling should give varied rewards"
    stats = result["stats"]
    rewards = [r for s in shards for r in s["rewards"]]
    assert stats["samples"] == 12 and stats["tokens_generated"] == 96 and stats["tokens_per_s"] > 0
    assert stats["mean_reward"] == pytest.approx(sum(rewards) / 12)
    assert shards[0]["stats"] == stats == executor.last_stats().result(10)
    again = fetch(executor.generate(prompts, 4).result(CALL_TIMEOUT_S)["shards"])
    assert [s["tokens"] for s in again] == [s["tokens"] for s in shards]  # seeded sampling is reproducible
    assert all(ref.free() for ref in result["shards"])
    with pytest.raises(RemoteError, match="not held here"):
        result["shards"][0].get(timeout=10)


def test_malformed_prompt_fails_with_the_engines_message(executor: ActorHandle) -> None:
    with pytest.raises(RemoteError, match=r"HTTP 400: 'input_ids\[1\]' = 999 is outside the vocabulary"):
        executor.generate([{"input_ids": [256, 999]}], 1).result(CALL_TIMEOUT_S)


def test_engine_killed_mid_rollout_is_replaced_and_the_rollout_completes(
    controller: ActorHandle, executor: ActorHandle
) -> None:
    victim = controller.cells().result(10)[1]
    pending = executor.generate(make_prompts(8, seed=3), 4, {"max_new_tokens": 96})
    deadline = time.monotonic() + 30
    while not in_flight(victim["url"]):  # kill it while it is generating for this rollout
        assert time.monotonic() < deadline and not pending.done()
        time.sleep(0.01)
    assert not pending.done()
    os.kill(victim["pid"], signal.SIGKILL)
    result = pending.result(CALL_TIMEOUT_S)
    shards = fetch(result["shards"])
    assert sum(len(s["tokens"]) for s in shards) == 32
    assert all(n == 96 for s in shards for n in s["response_lengths"])
    assert all(reason == "length" for s in shards for reason in s["finish_reasons"])
    replaced = wait_replaced(controller, victim)
    assert replaced["restarts"] == victim["restarts"] + 1 and str(victim["pid"]) in replaced["last_error"]
    controller.wait_until_serving(timeout_s=60).result(70)
    again = executor.generate(make_prompts(2, seed=4), 2).result(CALL_TIMEOUT_S)  # both engines serve again
    assert again["stats"]["samples"] == 4
    for ref in [*result["shards"], *again["shards"]]:
        ref.free()
