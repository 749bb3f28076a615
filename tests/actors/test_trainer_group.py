"""The trainer as actors: a 2-rank group trains, answers health mid-step, and reports a killed rank."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from actors.model_config import ModelConfig
from actors.trainer import OptimizerConfig, TrainerConfig
from actors.trainer.group import TrainerGroup, TrainerGroupError

pytestmark = pytest.mark.processes

TARGET = [256, 72, 101, 108, 108, 111, 33, 257]  # BOS "Hello!" EOS


def tiny_config(timeout_s: float = 20.0) -> TrainerConfig:
    return TrainerConfig(
        model=ModelConfig(hidden_size=32, num_layers=1, num_attention_heads=4, num_key_value_heads=2,
                          ffn_hidden_size=64, max_position_embeddings=32),
        optimizer=OptimizerConfig(lr=3e-3),
        collective_timeout_s=timeout_s,
        cpu_threads=1,
    )  # fmt: skip


@pytest.fixture
def group(no_leaks: None) -> Iterator[TrainerGroup]:
    trainers = TrainerGroup.spawn(world_size=2, config=tiny_config(), name="tg")
    try:
        yield trainers
    finally:
        trainers.kill()


def test_group_trains_and_ranks_agree(group: TrainerGroup, tmp_path: Path) -> None:
    assert [lay["dp_rank"] for lay in group.layouts] == [0, 1]
    batch = [TARGET] * 4
    losses = [group.train_step(batch, None, [1.0] * 4)["loss"] for _ in range(4)]
    assert losses[-1] < losses[0]
    digests = group.broadcast("weights_digest")
    assert digests[0] == digests[1]
    health = group.health()
    assert [h["step"] for h in health] == [4, 4] and not any(h["running"] for h in health)
    saved = group.save_hf_checkpoint(str(tmp_path / "hf"))  # every rank takes part, rank 0 writes
    exported = dict(group.export_hf_weights())
    on_disk = load_file(str(Path(saved) / "model.safetensors"))
    assert set(on_disk) == set(exported) and all(torch.equal(on_disk[n], t) for n, t in exported.items())
    with pytest.raises(TrainerGroupError, match="exists and is not an empty directory"):
        group.save_hf_checkpoint(saved)  # refused on every rank, and the trainer stays usable
    assert group.train_step(batch, None, [1.0] * 4)["step"] == 5


def test_health_answers_while_a_step_runs(group: TrainerGroup) -> None:
    long_batch = [TARGET * 4] * 64
    calls = [h.train_step(tokens=long_batch[:32], loss_mask=None, advantages=[1.0] * 32) for h in group.handles]
    seen_running = False
    deadline = time.monotonic() + 60
    while not all(c.done() for c in calls) and time.monotonic() < deadline:
        started = time.monotonic()
        states = group.health()
        assert time.monotonic() - started < 2.0
        seen_running = seen_running or any(s["running"] for s in states)
        time.sleep(0.02)
    assert seen_running
    assert [c.result(timeout=60)["step"] for c in calls] == [1, 1]


def test_killed_rank_is_reported_not_hung(group: TrainerGroup) -> None:
    long_batch = [TARGET * 4] * 1024
    calls = [h.train_step(tokens=long_batch, loss_mask=None, advantages=[1.0] * 1024) for h in group.handles]
    deadline = time.monotonic() + 30
    while not group.handles[1].method("health")().result(timeout=5)["running"] and time.monotonic() < deadline:
        time.sleep(0.01)
    killed_at = time.monotonic()
    os.kill(group.handles[1].pid, signal.SIGKILL)
    with pytest.raises(Exception, match="exited with code -9"):
        calls[1].result(timeout=5)
    # the survivor's collective fails (peer gone) instead of waiting forever
    with pytest.raises(Exception, match=r"train_step|TrainerFailed|peer|Connection"):
        calls[0].result(timeout=30)
    assert time.monotonic() - killed_at < 30
    with pytest.raises(TrainerGroupError, match="rank 1: ActorDied"):
        group.train_step([TARGET] * 2, None, [1.0, 1.0], timeout_s=30)
