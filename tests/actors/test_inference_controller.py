"""The inference controller as a real actor: real CPU engine processes behind the real sglang-router."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
import torch
from inference_fixtures import (
    CALL_TIMEOUT_S,
    HTTP_TIMEOUT_S,
    TINY,
    engine_version,
    greedy,
    greedy_until_done,
    reference_greedy,
    running_controller,
    served,
    wait_gone,
    wait_replaced,
    weights_of,
)

from actors.weights_wire import encode_named_tensors
from runtime import ActorHandle, RemoteError

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ActorHandle]:
    """Two CPU engines that serve their seed weights at once."""
    with running_controller("ctl", str(tmp_path_factory.mktemp("ctl"))) as handle:
        yield handle


def new_version(label: str) -> str:
    return f"{label}-{time.monotonic_ns()}"


def test_two_engines_serve_generate_through_the_router(controller: ActorHandle) -> None:
    cells = controller.cells().result(10)
    assert [c["id"] for c in cells] == ["ctl-0", "ctl-1"]
    assert all(c["state"] == "serving" and c["router_worker_id"] for c in cells), cells
    router = controller.router_url().result(10)
    workers = requests.get(router + "/workers", timeout=HTTP_TIMEOUT_S).json()["workers"]
    assert {w["url"] for w in workers} == set(controller.engine_urls().result(10))
    if controller.weight_version().result(10) == "default":  # seed weights: compare with the model built here
        assert greedy(router)["output_ids"] == reference_greedy(TINY)
    before = [served(c["url"]) for c in cells]
    replies = [greedy(router) for _ in range(6)]
    assert len({tuple(r["output_ids"]) for r in replies}) == 1
    assert [served(c["url"]) - b for c, b in zip(cells, before, strict=True)] == [3, 3]  # round robin


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"input_ids": [256, 999]}, "'input_ids[1]' = 999 is outside the vocabulary"),
        ({"text": "x", "sampling_params": {"top_p": 2}}, "sampling_params.top_p"),
        ({"input_ids": [256] * 200}, "longer than the model's context length (128 tokens)"),
    ],
)
def test_malformed_requests_through_the_router_get_4xx_with_a_message(
    controller: ActorHandle, body: dict[str, object], needle: str
) -> None:
    reply = requests.post(controller.router_url().result(10) + "/generate", json=body, timeout=HTTP_TIMEOUT_S)
    assert 400 <= reply.status_code < 500, reply.text
    assert needle in reply.text, reply.text


def test_weight_update_changes_greedy_generation_and_bumps_every_version(controller: ActorHandle) -> None:
    router = controller.router_url().result(10)
    other = TINY.model_copy(update={"seed": 99})
    version = new_version("v99")
    reply = controller.update_weights_from_tensors(weights_of(other), version).result(CALL_TIMEOUT_S)
    assert reply["weight_version"] == version and len(reply["engine_urls"]) == 2
    assert controller.weight_version().result(10) == version
    cells = controller.cells().result(10)
    assert all(c["state"] == "serving" and c["weight_version"] == version for c in cells), cells
    assert [engine_version(c["url"]) for c in cells] == [version, version]
    expected = reference_greedy(other)
    assert expected != reference_greedy(TINY)
    for _ in range(4):  # both engines, round robin: the same new tokens
        updated = greedy(router)
        assert updated["output_ids"] == expected and updated["meta_info"]["weight_version"] == version
    back = new_version("seed")
    controller.update_weights_from_tensors(weights_of(TINY), back).result(CALL_TIMEOUT_S)
    assert greedy(router)["output_ids"] == reference_greedy(TINY)


def test_update_lock_is_held_from_start_until_end_or_abort(controller: ActorHandle) -> None:
    router = controller.router_url().result(10)
    before = controller.weight_version().result(10)
    info = controller.start_update_weights().result(30)
    assert sorted(info["engine_urls"]) == sorted(controller.engine_urls().result(10))
    with ThreadPoolExecutor(2) as pool:
        try:
            waiting = pool.submit(greedy_until_done, router)  # generation is paused until the updates end
            second = controller.start_update_weights(timeout_s=0.5)
            with pytest.raises(RemoteError, match="weight-update lock is held by update " + info["token"]):
                second.result(30)
            with pytest.raises(RemoteError, match="does not hold the weight-update lock"):
                controller.end_update_weights("not-the-token", "x").result(30)
            assert not waiting.done()
            # The trainer posts to the engines itself, then ends the update.
            other = TINY.model_copy(update={"seed": 5})
            payload = {"serialized_named_tensors": [encode_named_tensors(list(weights_of(other).items()))]}
            for url in info["engine_urls"]:  # inside a begin/end session, as SGLang 0.5.23 requires
                assert requests.post(url + "/begin_weight_update", json={}, timeout=HTTP_TIMEOUT_S).ok
                reply = requests.post(url + "/update_weights_from_tensor", json=payload, timeout=HTTP_TIMEOUT_S)
                assert reply.status_code == 200, reply.text
                assert requests.post(url + "/end_weight_update", json={}, timeout=HTTP_TIMEOUT_S).ok
            later = controller.start_update_weights(timeout_s=20)  # waits for the lock rather than failing
            time.sleep(0.3)
            assert not later.done()
            version = new_version("direct")
            controller.end_update_weights(info["token"], version).result(30)
        except BaseException:
            controller.abort_update_weights(info["token"]).result(30)
            raise
        second_info = later.result(30)
        assert {engine_version(url) for url in second_info["engine_urls"]} == {version}
        assert controller.status().result(10)["weights_restorable"] is False  # it never saw those weights
        assert controller.abort_update_weights(second_info["token"]).result(30)["weight_version"] == version
        assert waiting.result(HTTP_TIMEOUT_S)["output_ids"] == reference_greedy(other)
    with pytest.raises(RemoteError, match="no update is in progress"):
        controller.abort_update_weights(second_info["token"]).result(30)
    assert before != controller.weight_version().result(10) == version
    # Bring the seed weights back through the controller, so that it holds a copy again.
    controller.update_weights_from_tensors(weights_of(TINY), new_version("seed")).result(CALL_TIMEOUT_S)
    assert greedy(router)["output_ids"] == reference_greedy(TINY)


def test_killed_engine_is_restarted_with_the_current_weights(controller: ActorHandle, tmp_path: Path) -> None:
    """The restarted engine gets what the controller saw: a weights directory, then a partial tensor update."""
    other = TINY.model_copy(update={"seed": 42})
    torch.save(weights_of(other), tmp_path / "pytorch_model.bin")
    controller.update_weights_from_disk(str(tmp_path), new_version("disk")).result(CALL_TIMEOUT_S)
    bucket = {"lm_head.weight": weights_of(TINY.model_copy(update={"seed": 7}))["lm_head.weight"]}
    version = new_version("bucket")
    controller.update_weights_from_tensors(bucket, version).result(CALL_TIMEOUT_S)
    victim = controller.cells().result(10)[0]
    os.kill(victim["pid"], signal.SIGKILL)
    router = controller.router_url().result(10)
    expected = reference_greedy(other, bucket)
    assert expected != reference_greedy(other)
    for _ in range(4):  # traffic keeps flowing while the engine is replaced
        assert greedy(router)["output_ids"] == expected
    replaced = wait_replaced(controller, victim)
    controller.wait_until_serving(timeout_s=60).result(70)
    assert replaced["id"] == victim["id"] and replaced["restarts"] == victim["restarts"] + 1
    assert replaced["pid"] != victim["pid"] and replaced["url"] != victim["url"]
    assert str(victim["pid"]) in replaced["last_error"] and "-9" in replaced["last_error"]
    assert replaced["weight_version"] == version == engine_version(replaced["url"])
    direct = requests.post(
        replaced["url"] + "/generate",
        json={"text": "The answer is", "sampling_params": {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True}},
        timeout=HTTP_TIMEOUT_S,
    ).json()
    assert direct["output_ids"] == expected  # restored from the controller's copy, not the seed weights
    workers = requests.get(router + "/workers", timeout=HTTP_TIMEOUT_S).json()["workers"]
    assert victim["url"] not in {w["url"] for w in workers}
    assert wait_gone([victim["pid"]]) == []


def test_pending_engine_joins_the_router_only_with_weights_and_dies_with_the_controller(tmp_path: Path) -> None:
    with running_controller("fresh", str(tmp_path), num_engines=1, initial_weights=False) as controller:
        [cell] = controller.cells().result(10)
        assert cell["state"] == "pending_weights" and cell["router_worker_id"] is None
        router = controller.router_url().result(10)
        assert requests.get(router + "/workers", timeout=HTTP_TIMEOUT_S).json()["workers"] == []
        assert controller.engine_urls().result(10) == [cell["url"]]
        # The trainer pushes directly and names no copy: a restarted engine must wait for the next update.
        info = controller.start_update_weights().result(30)
        payload = {"serialized_named_tensors": [encode_named_tensors(list(weights_of(TINY).items()))]}
        assert requests.post(cell["url"] + "/begin_weight_update", json={}, timeout=30).ok  # SGLang 0.5.23's session
        assert requests.post(cell["url"] + "/update_weights_from_tensor", json=payload, timeout=30).status_code == 200
        assert requests.post(cell["url"] + "/end_weight_update", json={}, timeout=30).ok
        controller.end_update_weights(info["token"], "v1").result(30)
        [cell] = controller.cells().result(10)
        assert cell["state"] == "serving" and cell["weight_version"] == "v1"
        assert greedy(router)["output_ids"] == reference_greedy(TINY)
        os.kill(cell["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while (now := controller.cells().result(10)[0])["state"] != "pending_weights" or now["restarts"] != 1:
            assert time.monotonic() < deadline, now
            time.sleep(0.1)
        assert requests.get(router + "/workers", timeout=HTTP_TIMEOUT_S).json()["workers"] == []
        controller.update_weights_from_tensors(weights_of(TINY), "v2").result(CALL_TIMEOUT_S)
        [cell] = controller.cells().result(10)
        assert cell["state"] == "serving" and cell["weight_version"] == "v2"
        status = controller.status().result(10)
        # SIGKILL the controller's process: its engine and router must go with it (PR_SET_PDEATHSIG).
        controller.kill()
        assert wait_gone([cell["pid"], status["router_pid"]]) == []


def test_killed_router_is_started_again_on_its_url_with_every_serving_engine(controller: ActorHandle) -> None:
    """actors/inference/router_keeper.py: the router's ports are kept, so its URL stays; the serving engines are
    registered with the new router (sglang-router 0.3.2's GET /workers lists them)."""
    before = controller.status().result(10)
    assert before["router_alive"] and before["router_restarts"] == 0
    os.kill(before["router_pid"], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        status = controller.status().result(10)
        serving = [c for c in status["cells"] if c["state"] == "serving"]
        if status["router_restarts"] == 1 and status["router_alive"] and all(c["router_worker_id"] for c in serving):
            break
        assert time.monotonic() < deadline, f"router not restarted within 60 s: {status}"
        time.sleep(0.1)
    assert status["router_url"] == before["router_url"] and status["router_pid"] != before["router_pid"]
    workers = requests.get(status["router_url"] + "/workers", timeout=HTTP_TIMEOUT_S).json()["workers"]
    assert {w["url"] for w in workers} == {c["url"] for c in serving} and len(serving) == 2
    assert greedy(status["router_url"])["output_ids"]


def test_memory_released_for_training_refuses_generation_until_resumed_in_sglang_order(
    controller: ActorHandle,
) -> None:
    """actors/inference/memory.py, in the order miles drives SGLang's memory saver (sglang/srt/entrypoints/
    http_server.py /release_memory_occupation and /resume_memory_occupation; tags from sglang/srt/constants.py):
    release everything, resume weights, update, resume kv_cache and cuda_graph. The engines' own /ready and
    /get_server_info show each step."""
    urls = sorted(controller.engine_urls().result(10))
    restarts = [c["restarts"] for c in controller.cells().result(10)]

    def released() -> list[list[str]]:
        return [requests.get(u + "/get_server_info", timeout=HTTP_TIMEOUT_S).json()["internal_states"][0]
                ["released_memory"] for u in urls]  # fmt: skip

    def ready() -> list[int]:
        return [requests.get(u + "/ready", timeout=HTTP_TIMEOUT_S).status_code for u in urls]

    with pytest.raises(RemoteError, match=r"unknown tags \['gpu'\]"):
        controller.release_memory(["gpu"]).result(10)
    with pytest.raises(RemoteError, match=r"memory \['weights'\] is not released"):
        controller.resume_memory(["weights"]).result(10)
    assert controller.release_memory().result(30) == {"released": ["cuda_graph", "kv_cache", "weights"],
                                                      "generation": False}  # fmt: skip
    try:
        assert released() == [["cuda_graph", "kv_cache", "weights"]] * 2 and ready() == [503, 503]
        with pytest.raises(RemoteError, match=r"generation is refused .*resume_memory\(\) first"):
            controller.router_url().result(10)
        with pytest.raises(RemoteError, match=r"resume_memory\(\['weights'\]\) before updating"):
            controller.start_update_weights().result(10)
        time.sleep(1.5)  # health checks pass by: released engines are not restarted
        cells = controller.cells().result(10)
        assert [(c["state"], c["restarts"]) for c in cells] == [("serving", n) for n in restarts], cells
        controller.resume_memory(["weights"]).result(30)
        assert released() == [["cuda_graph", "kv_cache"]] * 2 and ready() == [503, 503]
        other = TINY.model_copy(update={"seed": 11})
        version = new_version("colocated")
        controller.update_weights_from_tensors(weights_of(other), version).result(CALL_TIMEOUT_S)
        with pytest.raises(RemoteError, match="generation is refused"):
            controller.router_url().result(10)
    finally:
        state = controller.resume_memory().result(30)
    assert state == {"released": [], "generation": True} and released() == [[], []] and ready() == [200, 200]
    router = controller.router_url().result(10)
    for _ in range(2):  # both engines (round robin) serve the weights updated while the KV cache was released
        reply = greedy(router)
        assert reply["output_ids"] == reference_greedy(other) and reply["meta_info"]["weight_version"] == version
    controller.update_weights_from_tensors(weights_of(TINY), new_version("seed")).result(CALL_TIMEOUT_S)


def test_an_engine_that_dies_while_the_restarted_router_waits_for_it_is_restarted_at_once(
    controller: ActorHandle,
) -> None:
    """The router died and an engine hung (SIGSTOP): the new router waits up to add_worker_timeout_s (60 s) for
    the hung engine to be healthy; the engine then dies (kill -9). The controller must restart it at once, not
    after that wait (it used to block its health checks on the registration: a 60 s hole in the async rollout)."""
    before = controller.status().result(10)
    victim = next(c for c in before["cells"] if c["state"] == "serving")
    os.kill(victim["pid"], signal.SIGSTOP)
    try:
        os.kill(before["router_pid"], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while (status := controller.status().result(10))["router_restarts"] == before["router_restarts"]:
            assert time.monotonic() < deadline, f"router not restarted within 30 s: {status}"
            time.sleep(0.05)
        time.sleep(0.5)  # the new router is waiting for the hung engine now
    finally:
        os.kill(victim["pid"], signal.SIGKILL)
    replaced = wait_replaced(controller, victim, timeout_s=30)
    assert "exited" in replaced["last_error"] and replaced["restarts"] == victim["restarts"] + 1
    controller.wait_until_serving(timeout_s=60).result(70)
