"""The inference controller's engines as actors (actors.inference.actor_engines) taking the trainer's weights over
collective refs, as the demo's ``weight_sync = "refs"`` does (actors.demo.loop.WeightSync, actors.demo.ref_group):
the controller pauses the engines (SGLang's update sequence), trainer rank 0 buckets its weights as gloo refs, every
engine pulls them into its live parameters, the version is set with ``/update_weight_version``. Afterwards the
engines hold exactly what a save/load round trip of the trainer gives. An engine killed with SIGKILL comes back as
a new actor, and the next update forms the group again with it."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
import requests
import torch
from inference_fixtures import running_controller

from actors.cpu_engine import build_model_from_named_tensors, read_weights_dir
from actors.demo.loop import WeightSync
from actors.demo.ref_group import RefGroup
from actors.trainer.group import TrainerGroup
from tests.actors.test_collective_weights import engine_weight
from tests.actors.test_trainer_group import tiny_config

pytestmark = pytest.mark.processes

LAUNCHER = "actors.inference.actor_engines:actor_engine_launcher"


def assert_engines_hold(urls: list[str], trainers: TrainerGroup, version: str, tmp_path: Path) -> None:
    checkpoint = trainers.save_hf_checkpoint(str(tmp_path / f"hf-{version}"))
    reference = build_model_from_named_tensors(tiny_config().model, read_weights_dir(checkpoint))
    for url in urls:
        assert requests.get(url + "/get_model_info", timeout=30).json()["weight_version"] == version
        for name, param in reference.named_parameters():
            assert torch.equal(engine_weight(url, name), param.detach()), (url, name)


def test_actor_engines_take_weights_over_refs_and_a_restarted_one_rejoins(no_leaks: None, tmp_path: Path) -> None:
    config = tiny_config()
    trainers = TrainerGroup.spawn(world_size=2, config=config, name="refs-trainer")
    try:
        with running_controller(
            "refs", str(tmp_path), model=config.model.model_copy(update={"seed": 99}), launcher=LAUNCHER
        ) as controller:
            cells = controller.cells().result(30)
            assert [c["log_path"] for c in cells] == [None, None] and all(c["pid"] for c in cells)  # actors
            sync = WeightSync(trainers, controller, over_refs=True)
            sync.update("v1")
            assert sync.refs is not None and sync.refs.group is not None and sync.refs.group.name == "demo-weights-0"
            assert_engines_hold(controller.engine_urls().result(30), trainers, "v1", tmp_path)

            victim = cells[0]
            os.kill(victim["pid"], signal.SIGKILL)
            deadline = time.monotonic() + 60
            while (cell := controller.cells().result(30)[0])["pid"] in (victim["pid"], None) or cell["state"] not in (
                "pending_weights", "serving"
            ):  # fmt: skip
                assert time.monotonic() < deadline, f"engine {victim['id']} did not come back: {cell}"
                time.sleep(0.1)
            trainers.train_step([[1, 2, 3, 4], [5, 6, 7, 8]], None, [1.0, -1.0])  # new weights: v2 is not v1
            sync.update("v2")
            assert sync.refs.group.name == "demo-weights-1"  # formed again, with the new engine actor
            assert [c["state"] for c in controller.cells().result(30)] == ["serving", "serving"]
            assert_engines_hold(controller.engine_urls().result(30), trainers, "v2", tmp_path)
            sync.close()
            assert sync.refs.group is None
    finally:
        trainers.kill()


def test_refs_without_actor_engines_say_what_to_set() -> None:
    # process engines give no handles (engine_handles -> None): the first push names every way out
    with pytest.raises(ValueError, match=re.escape(LAUNCHER)) as refused:
        RefGroup(trainer=None).push(None, "v1")  # type: ignore[arg-type]
    assert "as_actor=True" in str(refused.value) and "weight_sync = 'http'" in str(refused.value)
