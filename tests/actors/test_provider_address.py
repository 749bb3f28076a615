"""Engines the launcher placed on a ``local`` host are reached at the launcher's address, as its router is.

The provider API's cells view gives each worker its host's ``reach_address`` (launcher/launch/cell_starter.py builds
WorkerInfo with it, launcher/launch/provider_service.py ``_worker_view`` reports it): a loopback address for a ``local``
host such as the built-in host "launcher" (launcher/config/pool_expanders.py). A controller on an SSH host must reach
that machine at the address it reaches the provider API at (actors/inference/provider_address.py); engines and the
router share the rule (actors/inference/provider_engines.py, actors/inference/router_pool.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors.inference.provider_engines import ProviderEngineLauncher, ProviderEngineProcess
from actors.inference.router_pool import PoolRouter
from launcher.config.hosts_config import load_config
from launcher.launch import provider_service
from launcher.launch.provider_views import CellView, WorkerView

CLUSTER = load_config(Path(__file__).resolve().parents[2] / "examples" / "cluster-2x8gpu.toml")


def cell_view(host: str, ports: dict[str, int]) -> CellView:
    """A cells() view of one worker on ``host`` at the address the launcher gives its workers."""
    address = CLUSTER.host(host).reach_address
    worker = WorkerView(
        worker_id="engines-0-0", kind="command", host=host, address=address, ports=ports, pid=4242, state="ready",
        gpu_ids=[], error=None, log_path=None, host_lost=False,
    )  # fmt: skip
    return CellView(
        pool="engines", index=0, cell_id="engines-0", state="alive", host=host, hosts=[host], address=address,
        ports=ports, pid=4242, restarts=0, death_reason=None, workers=[worker], lost_hosts=[],
    )  # fmt: skip


def _address(endpoint: str) -> dict[str, Any]:
    return {"endpoint": endpoint, "server_key": None}


def engine_url(host: str, endpoint: str) -> str:
    launcher = ProviderEngineLauncher(api=provider_service.connect(_address(endpoint)), pool="engines")
    return ProviderEngineProcess(launcher, "engines-0", cell_view(host, {"port": 30000, "nccl_port": 30001})).url


@pytest.mark.parametrize(
    ("host", "endpoint", "url"),
    [
        ("launcher", "tcp://10.0.0.1:7000", "http://10.0.0.1:30000"),  # controller on an SSH host
        ("launcher", "tcp://[fd00::1]:7000", "http://[fd00::1]:30000"),
        ("launcher", "tcp://127.0.0.1:7000", "http://127.0.0.1:30000"),  # controller on the launcher's machine
        ("gpu-b", "tcp://10.0.0.1:7000", "http://10.0.0.12:30000"),  # an SSH host's engine: its own address
    ],
)
def test_an_engine_on_a_local_host_is_reached_at_the_launchers_address(host: str, endpoint: str, url: str) -> None:
    assert CLUSTER.host("launcher").provider == "local" and CLUSTER.host("gpu-b").provider == "ssh"
    assert engine_url(host, endpoint) == url


@pytest.mark.parametrize("host", ["launcher", "gpu-b"])
def test_engines_and_the_router_of_one_host_are_reached_at_the_same_address(host: str) -> None:
    api = provider_service.connect(_address("tcp://10.0.0.1:7000"))
    router = PoolRouter(cell_view(host, {"port": 31000, "prometheus_port": 31001}), api)
    assert engine_url(host, "tcp://10.0.0.1:7000").removesuffix(":30000") == router.url.removesuffix(":31000")
