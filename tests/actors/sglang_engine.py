"""The CPU engine the SGLang conformance tests run against, and how they talk to it over HTTP."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import requests

from actors.model_config import ModelConfig
from actors.sglang_config import SGLangConfig, cpu_engine_argv

if TYPE_CHECKING:
    from tests.actors.conftest import EngineLauncher, EngineProcess

MODEL = ModelConfig(num_key_value_heads=2, seed=7, max_position_embeddings=128)
TIMEOUT_S = 30


def start_engine(spawn_module_engine: EngineLauncher) -> EngineProcess:
    """The engine one test module runs against (its ``engine`` fixture, module-scoped)."""
    port = spawn_module_engine.free_port()
    config = SGLangConfig(model_path="unused", port=port, random_seed=5, served_model_name="tiny")
    return spawn_module_engine(
        argv=[*cpu_engine_argv(config, model_config=MODEL), "--pause-wait-timeout", "2"], port=port
    )


def post(engine: EngineProcess, path: str, body: Any = None) -> requests.Response:
    return requests.post(engine.url + path, json=body, timeout=TIMEOUT_S)


def get(engine: EngineProcess, path: str) -> requests.Response:
    return requests.get(engine.url + path, timeout=TIMEOUT_S)


def generate(engine: EngineProcess, **body: Any) -> Any:
    reply = post(engine, "/generate", body)
    assert reply.status_code == 200, reply.text
    return reply.json()


GREEDY = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}


def hold_a_running_stream(engine: EngineProcess, path: str, body: dict[str, Any]) -> tuple[Any, Iterator[bytes]]:
    """Start a stream, read its first event, then pause in place: the batch stays running, frozen."""
    reply = requests.post(engine.url + path, json={**body, "stream": True}, stream=True, timeout=TIMEOUT_S)
    lines = reply.iter_lines()
    events = [next(line for line in lines if line)]
    assert post(engine, "/pause_generation", {"mode": "in_place"}).ok
    return reply, itertools.chain(events, lines)
