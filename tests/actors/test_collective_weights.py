"""Weight sync over collective refs: trainer rank 0 buckets its weights as device-resident refs, CPU-engine actors
pull them into their live parameters over a real gloo group, the version is set with SGLang's
``/update_weight_version``; the engines then hold exactly what a save/load round trip of the trainer gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import torch

from actors.cpu_engine import build_model_from_named_tensors, read_weights_dir
from actors.trainer import WeightPushError
from actors.trainer.group import TrainerGroup
from runtime import ActorHandle, RemoteError, spawn_many
from runtime.collective import create_group, destroy_group
from tests.actors.test_trainer_group import tiny_config

pytestmark = pytest.mark.processes

ENGINE_CLASS = "actors.cpu_engine.engine_actor:CPUEngineActor"


@pytest.fixture
def cluster(no_leaks: None) -> Iterator[tuple[TrainerGroup, list[ActorHandle]]]:
    config = tiny_config()
    trainers = TrainerGroup.spawn(world_size=1, config=config, name="sync-trainer")
    engines: list[ActorHandle] = []
    try:
        engines = spawn_many(ENGINE_CLASS, 2, name_prefix="sync-engine",
                             kwargs={"model": config.model.model_copy(update={"seed": 99})})  # fmt: skip
        yield trainers, engines
    finally:
        for engine in engines:
            engine.kill()
        trainers.kill()


def engine_weight(url: str, name: str) -> torch.Tensor:
    reply = requests.post(url + "/get_weights_by_name", json={"name": name, "truncate_size": 1 << 20}, timeout=30)
    assert reply.status_code == 200, reply.text
    return torch.tensor(reply.json())


def test_engines_pull_the_trainers_buckets_and_equal_a_save_load_round_trip(
    cluster: tuple[TrainerGroup, list[ActorHandle]], tmp_path: Path
) -> None:
    trainers, engines = cluster
    trainer = trainers.handles[0]
    urls = [engine.url().result(30) for engine in engines]
    group = create_group([trainer, *engines], backend="gloo", name="weights", timeout_s=30)
    try:
        before = engine_weight(urls[0], "model.embed_tokens.weight")
        replies = trainer.push_weights_over_refs(engines, "v-refs", "weights", 16 * 1024, 60.0).result(120)
        assert [r["success"] for r in replies] == [True, True] and replies[0]["loaded"] == replies[1]["loaded"] > 5
        trainer.save_hf_checkpoint(str(tmp_path / "hf")).result(120)
        reference = build_model_from_named_tensors(tiny_config().model, read_weights_dir(tmp_path / "hf"))
        assert not torch.equal(before, reference.model.embed_tokens.weight.detach())  # the engines started elsewhere
        for url in urls:
            info = requests.get(url + "/get_model_info", timeout=30).json()
            assert info["weight_version"] == "v-refs"
            for name, param in reference.named_parameters():
                assert torch.equal(engine_weight(url, name), param.detach()), (url, name)
        with pytest.raises(RemoteError, match="not a member of collective group 'elsewhere'") as raised:
            trainer.push_weights_over_refs(engines, "v-bad", "elsewhere").result(60)
        assert raised.value.remote_type == f"{WeightPushError.__module__}.WeightPushError"
    finally:
        destroy_group(group)
