"""kill -9 of a host agent while calls run: its workers die with it (PDEATHSIG), the launcher reports the host lost
and its cells dead, pending calls fail with ActorDied within seconds, the other host keeps serving, the cell can
be restarted (a new agent), and teardown leaves no processes and no keys behind."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
from launch_helpers import local_host, ssh_host, wait_for, write_hosts_toml

from launcher.config.hosts_config import load_config
from launcher.launch.worker_provider import WorkerProvider
from runtime import ActorDied

pytestmark = pytest.mark.processes

COUNTER = {"kind": "serve", "actor_class": "launch_actors:Counter", "kwargs": {"start": 10}}


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("provider_kind", ["local", "ssh"])
def test_kill9_of_a_host_agent_during_calls(provider_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if provider_kind == "ssh":
        sshd, keys = request.getfixturevalue("loopback_sshd"), request.getfixturevalue("ssh_keys")
        hosts = [ssh_host(name, "127.0.0.1", sshd.port, keys, tmp_path / name) for name in ("h0", "h1")]
    else:
        hosts = [local_host(name, tmp_path / name) for name in ("h0", "h1")]
    path = write_hosts_toml(tmp_path, hosts, [{"id": "c", "cells": 2, "strategy": "SPREAD", "worker": COUNTER}])
    messages: list[str] = []
    reports: list[Any] = []
    with WorkerProvider(load_config(path), progress=messages.append, on_death=reports.append) as provider:
        provider.start_all(deadline_s=60)
        victim, survivor = provider.handles("c")
        worker = provider.worker_infos("c")[0]
        assert worker.host == "h0"
        agent_pid = provider.link("h0").hello["pid"]
        busy = victim.sleep(30.0)  # blocks the victim's serial lane ...
        queued = [victim.add(1) for _ in range(20)]  # ... so these wait behind it
        side = [survivor.add(1) for _ in range(20)]
        time.sleep(0.3)

        os.kill(agent_pid, signal.SIGKILL)
        killed_at = time.monotonic()
        with pytest.raises(ActorDied, match="lost with its host agent"):
            busy.result(timeout=10)
        for call in queued:
            with pytest.raises(ActorDied):
                call.result(timeout=5)
        failed_in = time.monotonic() - killed_at
        assert failed_in < 5.0, f"pending calls took {failed_in:.1f}s to fail"
        wait_for(f"worker pid {worker.pid} to die with its agent", lambda: gone(worker.pid), 5)

        assert "h0" in provider.lost_hosts and provider.connected_hosts() == ["h1"]
        assert any(m.startswith("host 'h0' lost:") for m in messages), messages
        assert [c.alive for c in provider.cells("c")] == [False, True]
        (report,) = provider.deaths
        assert (report.cell_id, report.host, report.pid) == ("c-0", "h0", worker.pid)
        wait_for("the on_death callback", lambda: reports == [report], 5)
        with pytest.raises(ActorDied):
            victim.add(1).result(timeout=5)  # later calls fail at once
        assert [call.result(timeout=10) for call in side] == list(range(11, 31))
        assert survivor.add(1).result(timeout=10) == 31
        assert [group["labels"]["worker"] for group in _sd(provider)] == ["c-1-0"]

        restarted = provider.restart_cell("c", 0, deadline_s=60)  # a new agent on h0
        assert "h0" not in provider.lost_hosts and sorted(provider.connected_hosts()) == ["h0", "h1"]
        assert restarted.alive and restarted.handles[0].add(1).result(timeout=10) == 11
        assert restarted.handles[0].add_on_peer(survivor, 1).result(timeout=10) == 32
    for name in ("run", "h0", "h1"):
        assert list((tmp_path / name).glob("curve-*")) == [], f"CURVE keys left in {name}"


def _sd(provider: Any) -> list[dict[str, Any]]:
    with urllib.request.urlopen(provider.metrics_sd_url, timeout=5) as response:
        return json.loads(response.read())
