"""Helpers for the inference controller and rollout tests: a tiny model, a controller that is always stopped.

Importable by actor processes too (``inference_fixtures:parity_reward``): pytest puts this folder on sys.path
and spawned actors inherit it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import psutil
import requests
import torch

from actors import tokenizer
from actors.cpu_engine import build_model
from actors.cpu_engine.generation import Sequence as GenSequence
from actors.cpu_engine.generation import run_batch
from actors.cpu_engine.protocol import GenerationItem, SamplingParams
from actors.inference import InferenceController, RouterSettings
from actors.model_config import ModelConfig
from runtime import ActorHandle, spawn

logger = logging.getLogger(__name__)

TINY = ModelConfig(
    hidden_size=32, num_layers=1, num_attention_heads=2, num_key_value_heads=2, ffn_hidden_size=64,
    max_position_embeddings=128, seed=3,
)  # fmt: skip
HTTP_TIMEOUT_S = 30
CALL_TIMEOUT_S = 120
FAST_ROUTER = RouterSettings(policy="round_robin", health_check_interval_s=1, health_failure_threshold=1)


def parity_reward(prompt_ids: Sequence[int], response_ids: Sequence[int], label: Any) -> float:
    """Fraction of even response tokens: varied under sampling, so advantages are not all zero."""
    return sum(1 for t in response_ids if t % 2 == 0) / max(1, len(response_ids))


def controller_kwargs(server_id: str, **overrides: Any) -> dict[str, Any]:
    options: dict[str, Any] = {
        "server_id": server_id,
        "num_engines": 2,
        "model": TINY,
        "initial_weights": True,
        "router": FAST_ROUTER,
        "health_check_interval_s": 0.3,
        "health_failure_threshold": 2,
        "engine_start_timeout_s": 60.0,
        "cpu_engine_args": ["--pause-wait-timeout", "20"],
    }
    return options | overrides


def _descendants(pid: int) -> set[int]:
    with contextlib.suppress(psutil.Error):
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    return set()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_gone(pids: Sequence[int], timeout_s: float = 10.0) -> list[int]:
    """The pids still alive after up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [pid for pid in pids if _alive(pid)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def kill_and_wait_gone(handle: ActorHandle) -> None:
    """SIGKILL an actor this test spawned and check its process is gone within wait_gone's deadline."""
    pid = handle.pid
    handle.kill()
    assert wait_gone([pid]) == []


def in_flight(url: str, field: str = "num_in_flight") -> int:
    """A CPU engine's requests in flight (``num_in_flight_with_output``: those that have output tokens)."""
    info = requests.get(url + "/server_info", timeout=HTTP_TIMEOUT_S).json()
    return int(info["internal_states"][0][field])


@contextlib.contextmanager
def running_controller(server_id: str, tmp_dir: str, **overrides: Any) -> Iterator[ActorHandle]:
    """A started InferenceController actor; shut down, killed and checked gone afterwards, even on failure."""
    handle = spawn(
        InferenceController, kwargs=controller_kwargs(server_id, log_dir=tmp_dir, **overrides), name=server_id
    )
    try:
        handle.start().result(CALL_TIMEOUT_S)
        yield handle
    finally:
        seen = {handle.pid} | _descendants(handle.pid)  # the actor, its engines and router (and their children)
        with contextlib.suppress(Exception):
            status = handle.status().result(10)
            seen |= {c["pid"] for c in status["cells"] if c["pid"]} | {status["router_pid"]} - {None}
        try:
            handle.shutdown().result(60)
        except Exception:
            logger.exception("controller %s did not shut down cleanly", server_id)
        handle.kill()
        left = wait_gone(sorted(seen))
        assert not left, f"processes left by controller {server_id}: {left}"


def wait_replaced(controller: ActorHandle, victim: dict[str, Any], timeout_s: float = 60.0) -> dict[str, Any]:
    """The cell of ``victim`` (a cells() entry) once a new engine serves for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        cell = next(c for c in controller.cells().result(10) if c["id"] == victim["id"])
        if cell["state"] == "serving" and cell["pid"] != victim["pid"]:
            return cell
        assert time.monotonic() < deadline, f"{victim['id']} not replaced within {timeout_s}s: {cell}"
        time.sleep(0.05)


def greedy(router_url: str, text: str = "The answer is", n: int = 12) -> dict[str, Any]:
    body = {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}}
    reply = requests.post(router_url + "/generate", json=body, timeout=HTTP_TIMEOUT_S)
    assert reply.status_code == 200, reply.text
    return reply.json()


def greedy_until_done(router_url: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """Like :func:`greedy`, sent again while the engine aborts it (paused with mode=abort for an update)."""
    deadline = time.monotonic() + timeout_s
    while True:
        reply = greedy(router_url)
        if reply["meta_info"]["finish_reason"]["type"] != "abort" or time.monotonic() >= deadline:
            return reply


def reference_greedy(
    config: ModelConfig, overrides: dict[str, torch.Tensor] | None = None, text: str = "The answer is", n: int = 12
) -> list[int]:
    """Greedy tokens of ``build_model(config)`` (with ``overrides`` loaded) computed in this process."""
    model = build_model(config)
    if overrides:
        model.load_state_dict(overrides, strict=False)
    params = SamplingParams(max_new_tokens=n, temperature=0.0, ignore_eos=True)
    item = GenerationItem(
        rid="ref", input_ids=tokenizer.encode(text), params=params, return_logprob=False, logprob_text=False
    )
    seq = GenSequence(item=item, generator=torch.Generator().manual_seed(0), max_new_tokens=n)
    run_batch(model, [seq], model_lock=threading.Lock(), before_step=lambda live: None)
    return seq.output_ids


def weights_of(config: ModelConfig) -> dict[str, torch.Tensor]:
    return dict(build_model(config).state_dict())


def served(url: str) -> float:
    """How many requests the engine at ``url`` has finished (its /metrics)."""
    text = requests.get(url + "/metrics", timeout=HTTP_TIMEOUT_S).text
    line = next(line for line in text.splitlines() if line.startswith("sglang:num_requests_total"))
    return float(line.rsplit(" ", 1)[1])


def engine_version(url: str) -> str:
    return requests.get(url + "/model_info", timeout=HTTP_TIMEOUT_S).json()["weight_version"]
