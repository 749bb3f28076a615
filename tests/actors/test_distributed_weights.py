"""Weights over a torch.distributed group with SGLang's protocol: CPU engines (gloo) and the trainer side."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests
import torch

from actors.cpu_engine import build_model, build_model_from_named_tensors
from actors.model_config import ModelConfig
from actors.sglang_config import SGLangConfig, cpu_engine_argv
from actors.trainer.errors import WeightPushError
from actors.trainer.weights_push import push_over_group
from actors.weights_group import WeightsGroup
from tests.actors.conftest import REPO_ROOT, free_port
from tests.actors.cpu_reference import greedy_batch

pytestmark = pytest.mark.processes

if TYPE_CHECKING:
    from tests.actors.conftest import EngineLauncher, EngineProcess

# Like the trainer's tiny model (tests/actors/trainer_helpers.py), with the engine tokenizer's vocabulary.
TINY = ModelConfig(
    vocab_size=260,
    hidden_size=32,
    num_layers=2,
    num_attention_heads=8,
    num_key_value_heads=4,
    ffn_hidden_size=48,
    max_position_embeddings=64,
    seed=7,
)
PROMPT = [1, 5, 9, 2, 33, 17]
HTTP_TIMEOUT_S = 30


def start_engine(spawn: EngineLauncher, seed: int = 11) -> EngineProcess:
    port = spawn.free_port()
    config = SGLangConfig(model_path="unused", port=port, random_seed=seed, served_model_name="tiny")
    return spawn(argv=cpu_engine_argv(config, model_config=TINY), port=port)


def greedy_ids(engine: EngineProcess, n: int = 12) -> dict[str, Any]:
    body = {"input_ids": PROMPT, "sampling_params": {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}}
    reply = requests.post(engine.url + "/generate", json=body, timeout=HTTP_TIMEOUT_S)
    assert reply.status_code == 200, reply.text
    return reply.json()


def post(engine: EngineProcess, path: str, body: Any) -> requests.Response:
    return requests.post(engine.url + path, json=body, timeout=HTTP_TIMEOUT_S)


def test_engine_receives_a_broadcast_and_refuses_bad_metadata(spawn_engine: EngineLauncher) -> None:
    engine = start_engine(spawn_engine)
    before = greedy_ids(engine)["output_ids"]
    new_model = build_model(TINY.model_copy(update={"seed": 99}))
    pairs = list(new_model.state_dict().items())
    port = free_port()
    replies = push_over_group(
        [engine.url],
        pairs,
        weight_version="v-dist",
        master_address="127.0.0.1",
        master_port=port,
        backend="gloo",
        bucket_bytes=4096,  # several /update_weights_from_distributed requests
        timeout_s=20.0,
    )
    assert replies[0]["success"] is True, replies
    after = greedy_ids(engine)
    assert after["output_ids"] != before
    assert after["output_ids"] == greedy_batch(new_model, [PROMPT], 12)[0].output_ids
    assert after["meta_info"]["weight_version"] == "v-dist"

    # Bad metadata is refused (400 naming the tensor) before anything is received; nothing is loaded.
    group_port = free_port()
    hosted: dict[str, WeightsGroup] = {}

    def host() -> None:
        hosted["group"] = WeightsGroup(
            master_address="127.0.0.1",
            master_port=group_port,
            rank=0,
            world_size=2,
            group_name="g",
            backend="gloo",
            timeout_s=20.0,
        )

    thread = threading.Thread(target=host)
    thread.start()
    init = {"master_address": "127.0.0.1", "master_port": group_port, "rank_offset": 1, "world_size": 2}
    reply = post(engine, "/init_weights_update_group", {**init, "group_name": "g", "backend": "gloo"})
    thread.join(timeout=30)
    assert reply.status_code == 200 and reply.json()["success"] is True, reply.text
    again = post(engine, "/init_weights_update_group", {**init, "group_name": "g", "backend": "gloo"})
    assert again.status_code == 400 and "already exists" in again.text
    assert post(engine, "/begin_weight_update", {}).status_code == 200
    bad = {"names": ["model.norm.weight"], "dtypes": ["float32"], "shapes": [[3]], "group_name": "g"}
    reply = post(engine, "/update_weights_from_distributed", bad)
    assert reply.status_code == 400 and "'model.norm.weight'" in reply.text and "[3]" in reply.text
    unknown = {**bad, "names": ["model.nope.weight"], "shapes": [[32]]}
    assert "'model.nope.weight'" in post(engine, "/update_weights_from_distributed", unknown).text
    lengths = {**bad, "dtypes": []}
    assert post(engine, "/update_weights_from_distributed", lengths).status_code == 400
    missing = {**bad, "group_name": "other"}
    assert "no weight-update group 'other'" in post(engine, "/update_weights_from_distributed", missing).text
    assert post(engine, "/end_weight_update", {}).status_code == 200
    assert post(engine, "/destroy_weights_update_group", {"group_name": "g"}).json()["success"] is True
    assert post(engine, "/destroy_weights_update_group", {"group_name": "g"}).status_code == 400
    hosted["group"].close()
    assert greedy_ids(engine)["output_ids"] == after["output_ids"]


def test_push_names_the_engine_that_refuses(spawn_engine: EngineLauncher) -> None:
    engine = start_engine(spawn_engine)
    wrong = [("model.norm.weight", torch.ones(5))]
    started = time.monotonic()
    with pytest.raises(WeightPushError, match=engine.url) as refused:
        push_over_group(
            [engine.url],
            wrong,
            weight_version="never",
            master_address="127.0.0.1",
            master_port=free_port(),
            backend="gloo",
            bucket_bytes=None,
            timeout_s=5.0,
        )
    assert "'model.norm.weight' has shape [5]" in str(refused.value)
    assert time.monotonic() - started < 4.0, "a refusal must fail the push at once, not at the timeout"
    # The group was destroyed on the engine: a new one with the same name can be made.
    replies = push_over_group(
        [engine.url],
        [("model.norm.weight", torch.full((32,), 2.0))],
        weight_version="partial",
        master_address="127.0.0.1",
        master_port=free_port(),
        backend="gloo",
        bucket_bytes=None,
        timeout_s=10.0,
    )
    assert replies[0]["success"] is True
    norm = post(engine, "/get_weights_by_name", {"name": "model.norm.weight", "truncate_size": 3}).json()
    assert norm == [2.0, 2.0, 2.0]  # the partial push landed


TRAINER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from actors.model_config import ModelConfig
    from actors.trainer import ParallelConfig, Trainer, TrainerConfig

    port, group_port, out, urls = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
    config = TrainerConfig(
        model=ModelConfig.model_validate_json(sys.argv[5]),
        parallel=ParallelConfig(tensor_model_parallel_size=1),
        collective_timeout_s=60.0,
        cpu_threads=1,
    )
    with Trainer(rank=0, world_size=1, master_addr="127.0.0.1", master_port=port, config=config) as trainer:
        tokens = [[(3 * i + 1) % 64 for i in range(12)]] * 2
        trainer.train_step(tokens, [[0] * 3 + [1] * 9] * 2, [1.0, 1.0])  # weights differ from the engines'
        replies = trainer.push_weights_over_group(
            urls, "v-trained", master_address="127.0.0.1", master_port=group_port, bucket_bytes=8192, timeout_s=20.0
        )
        torch.save(dict(trainer.export_hf_weights()), out + "/export.pt")
        with open(out + "/replies.json", "w") as f:
            json.dump(replies, f)
    """
)


def test_trainer_pushes_over_gloo_to_two_engines(spawn_engine: EngineLauncher, tmp_path: Path) -> None:
    engines = [start_engine(spawn_engine, seed=11), start_engine(spawn_engine, seed=12)]
    before = [greedy_ids(engine)["output_ids"] for engine in engines]
    urls = json.dumps([engine.url for engine in engines])
    argv = [sys.executable, "-c", TRAINER_SCRIPT, str(free_port()), str(free_port()), str(tmp_path), urls]
    argv.append(TINY.model_dump_json())
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    replies = json.loads((tmp_path / "replies.json").read_text())
    assert [reply["success"] for reply in replies] == [True, True]
    exported = torch.load(tmp_path / "export.pt", weights_only=True)
    reference = build_model_from_named_tensors(TINY, list(exported.items()))
    expected = greedy_batch(reference, [PROMPT], 12)[0].output_ids
    for engine, old in zip(engines, before, strict=True):
        now = greedy_ids(engine)
        assert now["output_ids"] == expected
        assert now["output_ids"] != old
        assert now["meta_info"]["weight_version"] == "v-trained"
