"""The provider API (launcher/launch/provider_service.py) served by a real WorkerProvider: cells of real command workers
are listed, a kill -9 shows up as a death report and a dead cell, restart/stop/start act on the host, wrong pools and
cells are refused with errors naming them, and a peer without the launch's CURVE keys is refused (nothing it asked
for happens)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_helpers import local_host, wait_for, write_hosts_toml

from launcher.config.hosts_config import load_config
from launcher.launch.provider_service import ProviderApiError, ProviderClient, address_for
from launcher.launch.worker_provider import WorkerProvider
from runtime import RemoteError
from runtime.core.errors import CallRejected
from transport import security

pytestmark = pytest.mark.processes

SERVER = {
    "kind": "command",
    "command": "{python} -m http.server {port} --bind 127.0.0.1",
    "ready": {"kind": "http", "port": "port", "path": "/", "deadline_s": 30},
    "stop_grace_s": 1,
}


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[WorkerProvider]:
    path = write_hosts_toml(tmp_path, [local_host("n0", tmp_path / "n0")], [{"id": "w", "cells": 2, "worker": SERVER}])
    with WorkerProvider(load_config(path)) as provider:
        provider.start_all(deadline_s=60)
        yield provider


def client_of(provider: WorkerProvider, curve_dir: object) -> ProviderClient:
    return ProviderClient(address_for(provider.services, None), curve_dir=curve_dir, deadline_s=5)  # type: ignore[arg-type]


def test_cells_deaths_restart_stop_start(provider: WorkerProvider) -> None:
    api = client_of(provider, provider.curve_dir)
    assert api.call("pools") == ["w"]
    cells = api.call("cells", "w")
    assert [(c["cell_id"], c["state"], c["host"], c["restarts"]) for c in cells] == [
        ("w-0", "alive", "n0", 0),
        ("w-1", "alive", "n0", 0),
    ]
    pids = {w.worker_id: w.pid for w in provider.worker_infos("w")}
    assert [c["pid"] for c in cells] == [pids["w-0-0"], pids["w-1-0"]]
    assert cells[1]["ports"]["port"] == provider.cells("w")[1].workers[0].port
    assert cells[1]["address"] == "127.0.0.1" and cells[1]["workers"][0]["host_lost"] is False

    os.kill(cells[1]["pid"], signal.SIGKILL)
    (death,) = wait_for("the death report", lambda: api.call("deaths", 0), 10)
    assert (death["seq"], death["cell_id"], death["host"], death["pid"]) == (0, "w-1", "n0", cells[1]["pid"])
    assert "SIGKILL" in death["reason"]
    assert api.call("deaths", 1) == []
    assert api.call("cells", "w")[1]["state"] == "dead"

    again = api.call("restart_cell", "w", 1, deadline_s=30)
    assert (again["state"], again["host"], again["restarts"]) == ("alive", "n0", 1)
    assert again["pid"] != cells[1]["pid"] and again["pid"] == provider.cells("w")[1].workers[0].pid

    api.call("stop_cells", "w", [0])
    assert [c["state"] for c in api.call("cells", "w")] == ["stopped", "alive"]
    (started,) = api.call("start_cells", "w", [0], deadline_s=30)
    assert started["state"] == "alive" and started["pid"] not in (None, cells[0]["pid"])
    with pytest.raises(RemoteError, match=r"cells \[0\] are started; restart_cell replaces one"):
        api.call("start_cells", "w", [0], deadline_s=30)


def test_unknown_pools_and_cells_are_named(provider: WorkerProvider) -> None:
    api = client_of(provider, provider.curve_dir)
    with pytest.raises(RemoteError, match=r"no pool 'nope'.*its pools are \['w'\]"):
        api.call("cells", "nope")
    with pytest.raises(RemoteError, match=r"pool 'w' has no cells \[7\] \(its cells are 0..1\)"):
        api.call("restart_cell", "w", 7, deadline_s=10)
    with pytest.raises(CallRejected, match=r"argument .index. of provider-api\.restart_cell"):  # before the wire
        api.call("restart_cell", "w", -1, deadline_s=10)


def test_peers_without_the_launch_keys_are_refused(provider: WorkerProvider, tmp_path: Path) -> None:
    assert provider.curve_dir is not None, "CURVE is on by default"
    before = {w.worker_id: w.pid for w in provider.worker_infos("w")}
    other = security.generate_cluster_keys(tmp_path / "other-cluster").directory
    for keys in (None, other):  # no keys (plain TCP), another launch's keys
        with pytest.raises(ProviderApiError, match="did not answer restart_cell"):
            client_of(provider, keys).call("restart_cell", "w", 0, deadline_s=1)
    assert {w.worker_id: w.pid for w in provider.worker_infos("w")} == before, "a refused peer restarted a cell"
    assert provider.restarts == {}
    assert [c["state"] for c in client_of(provider, provider.curve_dir).call("cells", "w")] == ["alive"] * 2
