"""WorkerProvider on local hosts (LocalOpener) with real processes: command and serve workers, deaths, start
failures, GPU env, kill -9."""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import toml_text
from launch_helpers import PYTHON, launch_until_job_runs, local_host

from launcher.agent import agent_protocol as proto
from launcher.config.hosts_config import parse_config
from launcher.config.placement import WorkerPlacement
from launcher.errors import HostCheckError, WorkerStartError
from launcher.launch.cells import WorkerInfo
from launcher.launch.worker_provider import WorkerProvider

pytestmark = pytest.mark.processes


def config(tmp_path: Path, pools: list[dict[str, Any]], *, hosts: int = 1, gpus: Any = 0, **launcher: Any) -> Any:
    data = {
        "launcher": {"workdir": str(tmp_path / "run"), "stop_grace_s": 2, "gpu_check": False, **launcher},
        "hosts": [local_host(f"n{i}", tmp_path / f"n{i}", gpus=gpus) for i in range(hosts)],
        "job": {"entrypoint": "launch_jobs:exit_code"},
        "pools": pools,
    }
    path = tmp_path / "hosts.toml"
    path.write_text(toml_text.dump(data))
    return parse_config(path.read_text(), source=path)


HTTP = {
    "kind": "command",
    "command": "{python} -m http.server {port} --bind 127.0.0.1",
    "ready": {"kind": "http", "port": "port", "path": "/", "deadline_s": 20},
}
COUNTER = {"kind": "serve", "actor_class": "launch_actors:Counter", "kwargs": {"start": 5}}


def _gone(pids: list[int], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
            return True
        time.sleep(0.05)
    return False


def test_command_workers_spread_over_two_hosts(tmp_path: Path) -> None:
    cfg = config(
        tmp_path, [{"id": "web", "cells": 2, "workers_per_cell": 2, "strategy": "SPREAD", "worker": HTTP}], hosts=2
    )
    lines: list[str] = []
    with WorkerProvider(cfg, log_sink=lambda _s, text: lines.append(text)) as provider:
        cells = provider.start_all(deadline_s=60)
        assert [c.cell_id for c in cells] == ["web-0", "web-1"] and all(c.alive for c in cells)
        assert [w.host for w in provider.worker_infos("web")] == ["n0", "n1", "n0", "n1"]
        assert len(provider.addresses("web")) == 4
        pids = [w.pid for w in provider.worker_infos()]
        worker = provider.worker_infos("web")[0]
        assert Path(worker.log_path).read_text().count("Serving HTTP") == 1
    assert any(line.startswith(f"(web-0-0 pid={worker.pid} host=n0) ") for line in lines)
    assert _gone(pids)


def test_serve_actors_get_plan_env_and_named_lookup(tmp_path: Path) -> None:
    cfg = config(tmp_path, [{"id": "c", "cells": 2, "worker": {**COUNTER, "gpus": 0.5}}], gpus=[3])
    with WorkerProvider(cfg) as provider:
        provider.start_all(deadline_s=60)
        first, second = provider.handles("c")
        assert first.add(1).result(timeout=10) == 6
        where = first.where().result(timeout=10)
        assert where["CUDA_VISIBLE_DEVICES"] == "3" and where["MILES_WORKER_ID"] == "c-0-0"
        assert where["pid"] == provider.worker_infos("c")[0].pid
        assert first.add_on_peer(second, 10).result(timeout=10) == 15
        assert second.add_on_named("c-0-0", 100).result(timeout=10) == 106


def test_pickled_values_travel_between_the_processes_of_a_launch(tmp_path: Path) -> None:
    """The launcher (this process) and its workers on two hosts share the launch's session secret: an
    argparse.Namespace holding a function goes launcher -> worker -> worker and back (transport.sealed_pickle)."""
    cfg = config(tmp_path, [{"id": "c", "cells": 2, "strategy": "SPREAD", "worker": COUNTER}], hosts=2)
    with WorkerProvider(cfg) as provider:
        provider.start_all(deadline_s=60)
        first, second = provider.handles("c")
        value = argparse.Namespace(lr=0.5, scale=functools.partial(pow, 2))
        echoed, relayed_by = first.relay(second, value).result(timeout=30)
        assert echoed.lr == 0.5 and echoed.scale(10) == 1024 and relayed_by == provider.worker_infos("c")[0].pid


def test_dying_worker_marks_cell_dead_and_is_reported(tmp_path: Path) -> None:
    cfg = config(tmp_path, [{"id": "c", "cells": 2, "worker": COUNTER}])
    reports: list[Any] = []
    with WorkerProvider(cfg, on_death=reports.append) as provider:
        provider.start_all(deadline_s=60)
        handle = provider.handles("c")[1]
        handle.crash(7)
        deadline = time.monotonic() + 10
        while not reports and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [c.alive for c in provider.cells("c")] == [True, False]
        (report,) = provider.deaths
        assert report.cell_id == "c-1" and report.returncode == 7 and "exited with code 7" in str(report)
        assert reports == [report]
        with pytest.raises(Exception, match=r"cell c-1 is not alive"):
            handle.add(1).result(timeout=10)
        restarted = provider.restart_cell("c", 1, deadline_s=60)
        assert restarted.alive and restarted.handles[0].add(1).result(timeout=10) == 6


def test_start_failure_names_worker_and_shows_output(tmp_path: Path) -> None:
    bad = {"kind": "command", "command": "{python} -m launch_workers exit_now 4", "ready": {"kind": "none"}}
    # A batch worker that is never ready: the batch can only end by the bad worker's exit (with a worker that got
    # ready, a slow machine could finish the batch before the bad one exits, which is then a death, not a start
    # failure).
    waiting = {"kind": "command", "command": "{python} -m launch_workers sleep_forever"}
    waiting["ready"] = {"kind": "tcp", "port": "port", "deadline_s": 60}
    cfg = config(tmp_path, [{"id": "ok", "worker": waiting}, {"id": "bad", "worker": {**bad, "ports": {}}}])
    with WorkerProvider(cfg) as provider:
        with pytest.raises(WorkerStartError) as info:
            provider.start_all(deadline_s=30)
        assert provider.worker_infos() == []  # the whole batch was stopped
    message = str(info.value)
    assert "bad-0-0" in message and "host=n0" in message and "exited with code 4" in message
    assert "boom: cannot start (on purpose)" in message and "bad-0-0.log" in message


def test_readiness_deadline(tmp_path: Path) -> None:
    slow = {
        "kind": "command",
        "command": "{python} -m launch_workers sleep_forever",
        "ready": {"kind": "tcp", "port": "port", "deadline_s": 1},
    }
    cfg = config(tmp_path, [{"id": "slow", "worker": slow}])
    started = time.monotonic()
    with WorkerProvider(cfg) as provider, pytest.raises(WorkerStartError, match="not ready after 1s"):
        provider.start_all(deadline_s=30)
    assert time.monotonic() - started < 15


def test_ambient_cuda_visible_devices_is_honoured_or_refused(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    cfg = config(tmp_path, [{"id": "c", "worker": {**COUNTER, "gpus": 1}}], gpus=2)  # plan: GPU 0
    with WorkerProvider(cfg) as provider, pytest.raises(HostCheckError) as info:
        provider.connect()
    assert "host 'n0'" in str(info.value) and "CUDA_VISIBLE_DEVICES='5,6'" in str(info.value)
    cfg = config(tmp_path, [{"id": "c", "worker": {**COUNTER, "gpus": 1}}], gpus=[6])
    with WorkerProvider(cfg) as provider:
        provider.start_all(deadline_s=60)
        assert provider.handles("c")[0].where().result(timeout=10)["CUDA_VISIBLE_DEVICES"] == "6"


def test_state_file_lists_pids_and_is_removed(tmp_path: Path) -> None:
    cfg = config(tmp_path, [{"id": "web", "worker": HTTP}])
    state = tmp_path / "state.json"
    with WorkerProvider(cfg, state_path=state) as provider:
        provider.start_all(deadline_s=60)
        data = json.loads(state.read_text())
        assert data["launcher"]["pid"] == os.getpid()
        assert data["hosts"]["n0"]["workers"]["web-0-0"]["pid"] == provider.worker_infos()[0].pid
    assert not state.exists()


def test_kill9_of_launcher_leaves_nothing(tmp_path: Path) -> None:
    cfg_path = tmp_path / "hosts.toml"
    config(
        tmp_path,
        [{"id": "c", "cells": 2, "strategy": "SPREAD", "worker": COUNTER}, {"id": "web", "worker": HTTP}],
        hosts=2,
    )
    text = cfg_path.read_text().replace("launch_jobs:exit_code", "launch_jobs:wait_forever")
    cfg_path.write_text(text)
    launcher = launch_until_job_runs(
        [PYTHON, "-m", "launcher.console.cli", str(cfg_path), "--no-logs"], tmp_path / "marker.json"
    )
    everything = [p.pid for p in psutil.Process(launcher.pid).children(recursive=True)]
    assert len(everything) >= 5  # 2 agents + 3 workers
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=5)
    killed_at = time.monotonic()
    assert _gone(everything, timeout=10), "processes survived the launcher"
    print(f"all {len(everything)} processes gone {time.monotonic() - killed_at:.2f}s after kill -9", file=sys.stderr)


def test_serve_workers_report_their_metrics_port(tmp_path: Path) -> None:
    cfg = config(tmp_path, [{"id": "c", "worker": COUNTER}])
    with WorkerProvider(cfg) as provider:
        provider.start_all(deadline_s=60)
        (worker,) = provider.worker_infos("c")
        assert worker.boot_id and isinstance(worker.metrics_port, int) and worker.metrics_port > 0


def test_a_ready_event_that_overtakes_spawned_is_kept(tmp_path: Path) -> None:
    """A worker forked in milliseconds may print its ready line before the agent's ``spawned`` event is read (two
    agent threads write events): the worker stays ready, never goes back to spawned and waits for a second ready
    line that never comes (it hung launches until their start deadline)."""
    cfg = config(tmp_path, [{"id": "web", "cells": 1, "worker": HTTP}])
    provider = WorkerProvider(cfg)
    placement = WorkerPlacement("web", 0, 0, "n0", (), 0.0, 0, 1)
    worker = WorkerInfo(placement=placement, kind="command", address="127.0.0.1", ports={}, env={})
    provider.table._workers[worker.worker_id] = worker
    provider._events.on_event("n0", {"ev": proto.EV_READY, "id": worker.worker_id})
    provider._events.on_event("n0", {"ev": proto.EV_SPAWNED, "id": worker.worker_id, "pid": 4242, "log_path": "/x.log"})
    assert (worker.state, worker.pid, worker.log_path) == ("ready", 4242, "/x.log")
