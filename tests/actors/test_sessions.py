"""Multi-turn agent sessions: token in, token out through a real session server, router and CPU engine.

Mirrors miles' session server (radixark/miles ``miles/router/session/session_server.py``, ``sessions.py``,
``single_user_turn_trajectory.py`` and ``miles/utils/chat_template_utils/tito_tokenizer/base.py``: the stored
prompt + completion tokens, then only the appended messages' tokens) and its agentic rollout
(``miles/rollout/generate_hub/agentic_tool_call.py``, ``sample_utils.py``: a loss mask of 0 on tool output).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import pytest
import requests
from session_fixtures import make_trim_checkpoint, session_servers

from actors.model_config import ModelConfig
from actors.router import RouterProcess
from actors.sessions.agent import AgentSettings, run_agent
from actors.sessions.calculator import CalculatorError, calculate, calculator_reward, make_questions, tool_reply
from actors.sessions.chat_request import sampling_params
from actors.sessions.pool import session_server_pool
from actors.sessions.rollout import AgentRollout
from actors.sessions.trajectory import PlannedTurn, SessionTrajectory, TrajectoryError, Turn
from actors.tokenizer import BYTE_TOKENIZER, tokenizer_for
from actors.trainer import OptimizerConfig, TrainerConfig
from actors.trainer.group import TrainerGroup
from launcher.config.specs import PoolSpec
from runtime import spawn

if TYPE_CHECKING:
    from tests.actors.conftest import EngineLauncher

BYTE_MODEL = ModelConfig(hidden_size=32, num_layers=1, num_attention_heads=2, num_key_value_heads=2,
                         ffn_hidden_size=64, max_position_embeddings=512, seed=4)  # fmt: skip


def start_router(spawn_engine: EngineLauncher, tmp_path: Path, engines: list[str]) -> RouterProcess:
    router = RouterProcess(port=spawn_engine.free_port(), prometheus_port=spawn_engine.free_port(),
                           worker_urls=engines, policy="round_robin", health_check_interval_s=1,
                           health_failure_threshold=1, log_path=tmp_path / "router.log")  # fmt: skip
    router.start(timeout_s=60)
    return router


def test_calculator_tool_and_reward() -> None:
    assert calculate("2+3*4") == 14 and calculate("-(7-9)") == 2
    for bad in ("__import__('os')", "2**99", "1/2", "9" * 7, "+".join(["1"] * 9)):
        with pytest.raises(CalculatorError):
            calculate(bad)
    assert tool_reply("CALC(3 * 4)") == "3 * 4 = 12" and tool_reply("ANSWER: 12") is None
    assert tool_reply("hmm").startswith("error: no CALC")
    assert calculator_reward("ANSWER: 7", 7) == 1.0 and calculator_reward("it is 7", 7) == 0.5
    assert 0 < calculator_reward("x1", 7) < 0.2 and calculator_reward("none", 7) == 0.0
    assert all(calculate(q["question"][:-2]) == q["label"] for q in make_questions(5, seed=1))


@pytest.mark.processes
def test_recorded_tokens_are_the_engines_turn_by_turn(spawn_engine: EngineLauncher, tmp_path: Path) -> None:
    model = make_trim_checkpoint(tmp_path / "model")
    engine = spawn_engine("--model-path", str(model))
    router = start_router(spawn_engine, tmp_path, [engine.url])
    settings = AgentSettings(max_turns=3, max_tokens=10, resample_failed_calls=1)
    try:
        with session_servers(router.url, tmp_path, 1, "--model-path", str(model)) as (server,):
            session = requests.post(server.url + "/sessions", json={"sample_index": 5}, timeout=10).json()
            url = f"{server.url}/sessions/{session['session_id']}"

            async def episode() -> dict[str, int]:
                async with aiohttp.ClientSession() as http:
                    return await run_agent(http, url, "3+4=?", settings, seed=11)

            counts = asyncio.run(episode())
            record = requests.get(url, timeout=10).json()
            bad = requests.post(url + "/v1/chat/completions", json={"messages": "hi"}, timeout=10)
            assert bad.status_code == 400 and "messages" in bad.json()["error"]["message"]
            assert requests.post(url + "/v1/chat/completions", data=b"x" * (5 << 20), timeout=10).status_code == 413
            assert requests.delete(url, timeout=10).status_code == 204
            assert requests.get(url, timeout=10).status_code == 404
    finally:
        router.stop()
    tokenizer = tokenizer_for(str(model))
    leaves, samples = record["records"], record["samples"]
    assert counts["resamples"] >= 1 and len(leaves) == 1 + counts["resamples"]  # a random model never calls CALC
    assert [leaf["occurrence"] for leaf in leaves] == list(range(len(leaves)))
    assert {(s["sample_index"], s["occurrence"]) for s in samples} == {(5, i) for i in range(len(leaves))}
    retokenized_differs = False
    for leaf, sample in zip(leaves, samples, strict=True):
        turns = leaf["turns"]
        previous: list[int] = []
        for turn in turns:
            # token in, token out: each prompt starts with the previous prompt and exactly what the engine produced
            assert turn["prompt_ids"][: len(previous)] == previous
            body = {"input_ids": turn["prompt_ids"], "sampling_params": turn["sampling_params"], "return_logprob": True}
            replay = requests.post(engine.url + "/generate", json=body, timeout=30).json()
            assert replay["output_ids"] == turn["output_ids"]
            got = [entry[0] for entry in replay["meta_info"]["output_token_logprobs"]]
            assert got == pytest.approx(turn["output_logprobs"], abs=1e-5)
            previous = turn["prompt_ids"] + turn["output_ids"]
        assert sample["tokens"] == previous
        mask = sample["loss_mask"]
        assert sum(mask) == sum(len(t["output_ids"]) for t in turns)
        for turn in turns:  # 1 exactly on the engine's tokens; the prompt, tool output and template tokens are 0
            start = len(turn["prompt_ids"])
            assert mask[start : start + len(turn["output_ids"])] == [1] * len(turn["output_ids"])
            assert sample["rollout_logprobs"][start : start + len(turn["output_ids"])] == turn["output_logprobs"]
        if len(turns) > 1:
            assert "tool" in [m["role"] for m in turns[-1]["messages"]]
            history = turns[-1]["messages"] + [{"role": "assistant", "content": turns[-1]["reply"]}]
            whole = tokenizer.apply_chat_template(history, add_generation_prompt=False)
            retokenized_differs |= whole != sample["tokens"]
    assert any(len(leaf["turns"]) > 1 for leaf in leaves)
    assert retokenized_differs  # this template + tokenizer re-tokenize differently: the test would catch it


@pytest.mark.processes
def test_a_killed_session_server_loses_nothing_and_the_trainer_trains_on_the_records(
    spawn_engine: EngineLauncher, tmp_path: Path
) -> None:
    engine = spawn_engine("--model-config", BYTE_MODEL.model_dump_json(), "--max-batch-size", "4")
    router = start_router(spawn_engine, tmp_path, [engine.url])
    trainer = rollout = None
    try:
        with session_servers(router.url, tmp_path, 2) as servers:
            rollout = spawn(AgentRollout, kwargs={
                "session_urls": [s.url for s in servers], "dp_size": 1, "seed": 3, "max_concurrency": 8,
                "agent": AgentSettings(max_turns=3, max_tokens=12, resample_failed_calls=1),
            })  # fmt: skip
            trainer = TrainerGroup.spawn(world_size=1, config=TrainerConfig(
                model=BYTE_MODEL, optimizer=OptimizerConfig(lr=1e-3), collective_timeout_s=30, cpu_threads=1,
            ), name="session-trainer")  # fmt: skip
            call = rollout.generate(make_questions(4, seed=2), 4)
            killed = threading.Event()

            def kill_when_busy() -> None:  # kill -9 while the first server holds sessions
                while not call.done() and not killed.is_set():
                    if servers[0].health()["sessions"] >= 2:
                        servers[0].kill()
                        killed.set()
                    time.sleep(0.01)

            killer = threading.Thread(target=kill_when_busy, daemon=True)
            killer.start()
            result = call.result(timeout=120)
            killer.join(timeout=10)
            assert killed.is_set(), "the rollout ended before the session server could be killed"
            stats = result["stats"]
            assert stats["samples_retried"] >= 1 and stats["samples_lost"] == 0
            shard = result["shards"][0].get()
            keys = list(zip(shard["prompt_index"], shard["sample_index"], shard["occurrence"], strict=True))
            assert len(set(keys)) == len(keys) == stats["leaves"]  # never recorded twice
            assert {(p, s) for p, s, _ in keys} == {(p, s) for p in range(4) for s in range(4)}  # none lost
            assert stats["leaves"] > 16  # resampled replies forked leaves
            for tokens, mask in zip(shard["tokens"], shard["loss_mask"], strict=True):
                assert len(tokens) == len(mask) and mask[0] == 0 and 0 < sum(mask) < len(mask)
            metrics = trainer.train_on_shards(result["shards"], timeout_s=60)
            assert metrics["tokens"] == sum(sum(mask) for mask in shard["loss_mask"])
            assert metrics["step"] == 1
    finally:
        for group in (rollout, trainer):
            if group is not None:
                group.kill()
        router.stop()


def test_the_session_pool_is_a_launcher_command_pool_of_n_servers() -> None:
    table = session_server_pool("sessions", cells=3, controller="inference-0-0", model_path="/models/m p")
    pool = PoolSpec.model_validate(table)
    assert (pool.id, pool.cells, pool.worker.kind, pool.worker.gpus) == ("sessions", 3, "command", 0)
    assert pool.worker.command == (
        "{python} -m actors.sessions --port {port} --host 0.0.0.0 --controller inference-0-0 --model-path '/models/m p'"
    )
    assert pool.worker.ready.path == "/health"
    with pytest.raises(ValueError, match="exactly one"):
        session_server_pool(cells=1)


def _turn(planned: PlannedTurn, output: list[int], reply: str) -> Turn:
    return Turn(messages=planned.messages, reply=reply, prompt_ids=tuple(planned.prompt_ids), output_ids=tuple(output),
                logprobs=tuple(-0.5 for _ in output), finish_reason="stop", weight_version="v0")  # fmt: skip


def test_trajectory_continues_forks_and_races_into_leaves_keyed_by_occurrence() -> None:
    """single_user_turn_trajectory.py's append-only rule, with forks instead of refusals: every request is recorded
    on exactly one leaf and no leaf's tokens are ever rewritten."""
    trajectory = SessionTrajectory(BYTE_TOKENIZER, sample_index=2, max_turns=6)
    user = [{"role": "user", "content": "1+1=?"}]
    first = trajectory.plan(user)
    assert first.base is None and first.prompt_ids == BYTE_TOKENIZER.apply_chat_template(user)
    leaf0 = trajectory.commit(first, _turn(first, [67, 65, 76], "CAL"))
    history = [*user, {"role": "assistant", "content": "CAL"}, {"role": "tool", "content": "error"}]
    second, racing = trajectory.plan(history), trajectory.plan(history)  # two requests on the same leaf at once
    tool_ids = BYTE_TOKENIZER.encode("<|tool|>\nerror\n<|assistant|>\n", add_special_tokens=False)
    assert second.prompt_ids == [*first.prompt_ids, 67, 65, 76, *tool_ids]  # engine tokens kept, then the tool's
    assert trajectory.commit(second, _turn(second, [49], "1")) is leaf0
    leaf1 = trajectory.commit(racing, _turn(racing, [50], "2"))  # the leaf moved on meanwhile: a fork, not a rewrite
    assert leaf1.occurrence == 1 and leaf1.turns[0] is leaf0.turns[0] and len(leaf0.turns) == 2
    back = trajectory.plan([*user, {"role": "assistant", "content": "CAL"}, {"role": "user", "content": "again"}])
    assert back.base == (leaf0, 1)  # extends an earlier point of leaf 0: forks there
    trajectory.commit(back, _turn(back, [51], "3"))
    samples = trajectory.samples()
    assert [(s["sample_index"], s["occurrence"], s["turns"]) for s in samples] == [(2, 0, 2), (2, 1, 2), (2, 2, 2)]
    for sample, leaf in zip(samples, trajectory.leaves, strict=True):
        assert sample["tokens"] == list(leaf.turns[-1].token_ids)
        assert sum(sample["loss_mask"]) == 4 and sample["loss_mask"][: len(first.prompt_ids)] == [0] * len(
            first.prompt_ids
        )
    with pytest.raises(TrajectoryError, match="add nothing"):
        trajectory.plan([*user, {"role": "assistant", "content": "CAL"}])
    with pytest.raises(TrajectoryError, match=r"messages\[0\]"):
        trajectory.plan([{"content": "no role"}])
    with pytest.raises(ValueError, match="n must be 1"):
        sampling_params({"n": 2})
    with pytest.raises(ValueError, match="temperature must be a number"):
        sampling_params({"temperature": "hot"})
    assert sampling_params({"max_tokens": 5, "seed": 3})["max_new_tokens"] == 5
    trajectory.commit(trajectory.plan(user), _turn(trajectory.plan(user), [1], "x"))
    trajectory.commit(trajectory.plan(user), _turn(trajectory.plan(user), [1], "x"))
    with pytest.raises(TrajectoryError, match="max_turns"):
        trajectory.plan(user)
