"""The real sglang-router in front of real CPU engine processes: routing, worker changes, a killed worker."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest
import requests

from actors.router import RouterError, RouterProcess
from launcher.console.log_filter import ConsoleLogFilter

pytestmark = pytest.mark.processes

if TYPE_CHECKING:
    from tests.actors.conftest import EngineLauncher, EngineProcess

HTTP_TIMEOUT_S = 30
GREEDY = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}


@pytest.fixture
def make_router(spawn_engine: EngineLauncher, tmp_path: Path) -> Iterator[Callable[..., RouterProcess]]:
    """Build routers on free ports with fast health checks; every one is stopped and checked gone."""
    routers: list[RouterProcess] = []

    def make(**kwargs: Any) -> RouterProcess:
        options: dict[str, Any] = {
            "port": spawn_engine.free_port(),
            "prometheus_port": spawn_engine.free_port(),
            "policy": "round_robin",
            "health_check_interval_s": 1,
            "health_failure_threshold": 1,
            "log_path": tmp_path / f"router-{len(routers)}.log",
        }
        router = RouterProcess(**(options | kwargs))
        routers.append(router)
        return router

    try:
        yield make
    finally:
        for router in routers:
            pid = router.pid
            router.stop()
            assert not router.is_running()
            if pid is not None and psutil.pid_exists(pid):
                assert "sglang_router" not in " ".join(psutil.Process(pid).cmdline()), f"router {pid} left"


def start_engines(spawn_engine: EngineLauncher, count: int) -> list[EngineProcess]:
    engines = [spawn_engine(wait=False) for _ in range(count)]  # start together, then wait for each
    for engine in engines:
        engine.wait_ready()
    return engines


def served(engine: EngineProcess) -> float:
    """How many requests ``engine`` has finished, from its own /metrics."""
    text = requests.get(engine.url + "/metrics", timeout=HTTP_TIMEOUT_S).text
    line = next(line for line in text.splitlines() if line.startswith("sglang:num_requests_total"))
    return float(line.rsplit(" ", 1)[1])


def generate(router: RouterProcess, text: str = "route me") -> dict[str, Any]:
    body = {"text": text, "sampling_params": GREEDY, "return_logprob": True}
    reply = requests.post(router.url + "/generate", json=body, timeout=HTTP_TIMEOUT_S)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_router_spreads_requests_and_survives_a_killed_engine(
    spawn_engine: EngineLauncher, make_router: Callable[..., RouterProcess]
) -> None:
    first, second = start_engines(spawn_engine, 2)
    router = make_router(worker_urls=[first.url])
    router.start(timeout_s=30)
    second_id = router.add_worker(second.url, timeout_s=20)
    workers = {w["url"]: w for w in router.list_workers()}
    assert set(workers) == {first.url, second.url} and all(w["is_healthy"] for w in workers.values())
    assert workers[second.url]["id"] == second_id

    before = [served(first), served(second)]
    replies = [generate(router) for _ in range(6)]
    assert len({tuple(r["output_ids"]) for r in replies}) == 1  # same weights, greedy: same tokens
    assert all(len(r["meta_info"]["output_token_logprobs"]) == 8 for r in replies)
    assert served(first) - before[0] == 3 and served(second) - before[1] == 3  # round robin
    assert "smg_" in requests.get(router.metrics_url, timeout=HTTP_TIMEOUT_S).text

    router.remove_worker(second_id, timeout_s=20)
    assert [w["url"] for w in router.list_workers()] == [first.url]
    router.add_worker(second.url, timeout_s=20)

    first.kill()
    router.wait_worker_unhealthy(first.url, timeout_s=20)
    before_second = served(second)
    for _ in range(5):
        generate(router)
    assert served(second) - before_second == 5


def test_router_errors_name_the_router_and_the_worker(
    spawn_engine: EngineLauncher, make_router: Callable[..., RouterProcess]
) -> None:
    router = make_router()
    router.start(timeout_s=30)
    nowhere = f"http://127.0.0.1:{spawn_engine.free_port()}"
    started = time.monotonic()
    with pytest.raises(RouterError) as info:
        router.add_worker(nowhere, timeout_s=3)
    assert time.monotonic() - started < 10
    assert nowhere in str(info.value) and router.url in str(info.value)

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        clash = make_router(port=port)
        with pytest.raises(RouterError, match=f"127.0.0.1:{port}"):
            clash.start(timeout_s=10)
    assert not clash.is_running()


def test_router_tokenizer_warning_for_a_random_init_engine_stays_in_the_log_file(
    spawn_engine: EngineLauncher, make_router: Callable[..., RouterProcess]
) -> None:
    """sglang-router loads a tokenizer from each worker's /server_info ``model_path``; the built-in model with random
    weights reports ``random-init(seed=N)`` and has none, so the router's warning is expected: log file only."""
    engine = spawn_engine()
    model_path = requests.get(engine.url + "/server_info", timeout=HTTP_TIMEOUT_S).json()["model_path"]
    assert model_path.startswith("random-init(seed=")
    router = make_router(worker_urls=[engine.url], log_level="warn")
    router.start(timeout_s=30)
    assert router.log_path is not None
    deadline = time.monotonic() + 20
    while "Failed to load tokenizer" not in (text := router.log_path.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    lines = text.splitlines()
    assert any(f"from {model_path}: " in line for line in lines), text  # the log file keeps it
    console = ConsoleLogFilter("warnings")
    shown = [line for line in lines if console.shows(line)]
    assert not any("tokenizer" in line for line in shown), shown
