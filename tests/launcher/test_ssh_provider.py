"""WorkerProvider against a real sshd on 127.0.0.1: agents over SSH, clear errors, deaths, kill -9 of the launcher."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from launch_helpers import PYTHON, launch_until_job_runs, ssh_host, subprocess_env, write_hosts_toml
from sshd_fixture import Sshd, SshKeys

from actors.processes import free_port
from launcher.config.hosts_config import parse_config
from launcher.errors import HostAuthError, HostCheckError, HostUnreachable, WorkerStartError
from launcher.launch.worker_provider import WorkerProvider

pytestmark = pytest.mark.processes

COUNTER = {"kind": "serve", "actor_class": "launch_actors:Counter", "kwargs": {"start": 1}}


def load(path: Path) -> Any:
    return parse_config(path.read_text(), source=path)


def two_hosts(sshd: Sshd, keys: SshKeys, tmp_path: Path, **fields: Any) -> list[dict[str, Any]]:
    return [ssh_host(name, "127.0.0.1", sshd.port, keys, tmp_path / name, **fields) for name in ("a", "b")]


def wait_no_sessions(sshd: Sshd, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while sshd.session_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    return sshd.session_pids()


def test_serve_actors_on_two_ssh_hosts(loopback_sshd: Sshd, ssh_keys: SshKeys, tmp_path: Path) -> None:
    path = write_hosts_toml(
        tmp_path,
        two_hosts(loopback_sshd, ssh_keys, tmp_path, gpus=2),
        [{"id": "c", "cells": 2, "workers_per_cell": 2, "strategy": "SPREAD", "worker": {**COUNTER, "gpus": 1}}],
        gpu_check=False,  # GPU ids as labels: this machine has no GPU
    )
    lines: list[str] = []
    steps: list[str] = []
    config = load(path)
    with WorkerProvider(config, log_sink=lambda _s, text: lines.append(text), progress=steps.append) as provider:
        provider.start_all(deadline_s=60)
        assert provider.services.reach_back == {"a": "127.0.0.1", "b": "127.0.0.1"}  # where hosts reach the launcher
        for host in ("a", "b"):  # per-host progress with timings: SSH, then the agent with the host's versions
            assert any(re.match(rf"host {host}: SSH \S+@127\.0\.0\.1:\d+ in \d+\.\d\ds$", s) for s in steps), steps
            agent = rf"host {host}: agent pid \d+ up \(Python 3\.\d+\.\d+, miles-actors \S+, CURVE keys installed\) in "
            assert any(re.match(agent, s) for s in steps), steps
        sd_port = config.launcher.metrics_sd_port or provider.services.service_discovery.port
        assert f"Prometheus service discovery from a, b: http://127.0.0.1:{sd_port}/targets" in steps
        handles = provider.handles("c")
        wheres = [h.where().result(timeout=10) for h in handles]
        assert [w["MILES_HOST"] for w in wheres] == ["a", "b", "a", "b"]
        assert [w["CUDA_VISIBLE_DEVICES"] for w in wheres] == ["0", "0", "1", "1"]
        assert [w["RANK"] for w in wheres] == ["0", "1", "0", "1"]
        assert handles[0].add_on_peer(handles[3], 2).result(timeout=10) == 3
        assert handles[1].add_on_named("c-1-0", 5).result(timeout=10) == 6
        assert len(loopback_sshd.session_pids()) >= 6  # 2 agents (+ their sessions) + 4 workers
        assert handles[1].say("hello from b").result(timeout=10) == "hello from b"
        deadline = time.monotonic() + 10
        while not any(line.endswith("host=b) hello from b") for line in lines) and time.monotonic() < deadline:
            time.sleep(0.05)
    assert any(line.endswith("host=b) hello from b") for line in lines), lines  # prints stream, INFO records don't
    assert not any(" INFO " in line for line in lines), lines
    assert wait_no_sessions(loopback_sshd) == []


def test_worker_death_over_ssh_is_reported(loopback_sshd: Sshd, ssh_keys: SshKeys, tmp_path: Path) -> None:
    path = write_hosts_toml(
        tmp_path,
        two_hosts(loopback_sshd, ssh_keys, tmp_path),
        [{"id": "c", "cells": 2, "strategy": "SPREAD", "worker": COUNTER}],
    )
    with WorkerProvider(load(path)) as provider:
        provider.start_all(deadline_s=60)
        provider.handles("c")[1].crash(9)
        deadline = time.monotonic() + 10
        while not provider.deaths and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [c.alive for c in provider.cells("c")] == [True, False]
        assert provider.deaths[0].host == "b" and provider.deaths[0].returncode == 9


def test_bad_key_gives_clear_error_fast(loopback_sshd: Sshd, ssh_keys: SshKeys, tmp_path: Path) -> None:
    host = ssh_host("a", "127.0.0.1", loopback_sshd.port, ssh_keys, tmp_path / "a")
    host["ssh"]["key_file"] = str(ssh_keys.bad_client_key)
    started = time.monotonic()
    with WorkerProvider(load(write_hosts_toml(tmp_path, [host], [{"id": "c", "worker": COUNTER}]))) as provider:
        with pytest.raises(HostAuthError) as info:
            provider.connect()
    assert time.monotonic() - started < 5
    assert "host 'a'" in str(info.value) and "bad_client_ed25519" in str(info.value)
    assert "authorized_keys" in str(info.value)


def test_missing_key_file(loopback_sshd: Sshd, ssh_keys: SshKeys, tmp_path: Path) -> None:
    host = ssh_host("a", "127.0.0.1", loopback_sshd.port, ssh_keys, tmp_path / "a")
    host["ssh"]["key_file"] = str(tmp_path / "nope")
    with WorkerProvider(load(write_hosts_toml(tmp_path, [host], [{"id": "c", "worker": COUNTER}]))) as provider:
        with pytest.raises(HostAuthError, match="does not exist"):
            provider.connect()


def test_refused_port_gives_clear_error_fast(ssh_keys: SshKeys, tmp_path: Path) -> None:
    host = ssh_host("a", "127.0.0.1", free_port(), ssh_keys, tmp_path / "a")
    started = time.monotonic()
    with WorkerProvider(load(write_hosts_toml(tmp_path, [host], [{"id": "c", "worker": COUNTER}]))) as provider:
        with pytest.raises(HostUnreachable, match=r"host 'a' \(root@127.0.0.1:\d+\): cannot connect"):
            provider.connect()
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("python", "expected"),
    [
        ("/nonexistent/python3", "cannot run '/nonexistent/python3'"),
        ("/usr/bin/python3", "miles-actors is not installed in /usr/bin/python3 on host 'a'"),
    ],
)
def test_host_python_and_package_are_checked(
    loopback_sshd: Sshd, ssh_keys: SshKeys, tmp_path: Path, python: str, expected: str
) -> None:
    if python == "/usr/bin/python3" and not Path(python).exists():
        pytest.skip("no system python3")
    host = ssh_host("a", "127.0.0.1", loopback_sshd.port, ssh_keys, tmp_path / "a", python=python)
    host["env"] = {}  # no PYTHONPATH: the system python must not see the package
    with WorkerProvider(load(write_hosts_toml(tmp_path, [host], [{"id": "c", "worker": COUNTER}]))) as provider:
        with pytest.raises(HostCheckError, match=expected) as info:
            provider.connect()
    assert "host 'a'" in str(info.value)
    assert wait_no_sessions(loopback_sshd) == []


def test_start_failure_over_ssh_cleans_up(loopback_sshd: Sshd, ssh_keys: SshKeys, tmp_path: Path) -> None:
    bad = {
        "kind": "command",
        "command": "{python} -m launch_workers exit_now 4",
        "ports": {},
        "ready": {"kind": "none"},
    }
    path = write_hosts_toml(
        tmp_path,
        two_hosts(loopback_sshd, ssh_keys, tmp_path),
        [{"id": "ok", "worker": COUNTER}, {"id": "bad", "hosts": ["b"], "worker": bad}],
    )
    with WorkerProvider(load(path)) as provider, pytest.raises(WorkerStartError) as info:
        provider.start_all(deadline_s=60)
    assert "bad-0-0 (host=b" in str(info.value) and "boom" in str(info.value)
    assert wait_no_sessions(loopback_sshd) == []


def test_kill9_of_launcher_leaves_nothing_over_ssh(loopback_sshd: Sshd, ssh_keys: SshKeys, tmp_path: Path) -> None:
    path = write_hosts_toml(
        tmp_path,
        two_hosts(loopback_sshd, ssh_keys, tmp_path),
        [{"id": "c", "cells": 4, "strategy": "SPREAD", "worker": COUNTER}],
        job="launch_jobs:wait_forever",
    )
    launcher = launch_until_job_runs([PYTHON, "-m", "launcher.console.cli", str(path), "--no-logs"],
                                     tmp_path / "marker.json")  # fmt: skip
    assert len(loopback_sshd.session_processes("runtime.worker")) == 4
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=5)
    assert wait_no_sessions(loopback_sshd, timeout=10) == [], "processes survived on the ssh host"


def test_status_and_down_over_ssh(loopback_sshd: Sshd, ssh_keys: SshKeys, tmp_path: Path) -> None:
    path = write_hosts_toml(
        tmp_path,
        two_hosts(loopback_sshd, ssh_keys, tmp_path),
        [{"id": "c", "cells": 2, "strategy": "SPREAD", "worker": COUNTER}],
        job="launch_jobs:wait_forever",
    )
    launcher = launch_until_job_runs([PYTHON, "-m", "launcher.console.cli", str(path), "--no-logs"],
                                     tmp_path / "marker.json")  # fmt: skip
    try:
        status = subprocess.run(
            [PYTHON, "-m", "launcher.console.cli", "status", str(path)],
            capture_output=True,
            text=True,
            env=subprocess_env(),
            timeout=60,
        )
        assert status.returncode == 0, status.stderr
        rows = [line.split()[:6] for line in status.stdout.splitlines()[2:]]
        assert [(r[0], r[3], r[5]) for r in rows] == [("a", "c-0-0", "attached"), ("b", "c-1-0", "attached")]
        logs = subprocess.run(  # read over SSH from host b
            [PYTHON, "-m", "launcher.console.cli", "logs", str(path), "c-1"],
            capture_output=True,
            text=True,
            env=subprocess_env(),
            timeout=60,
        )
        assert logs.returncode == 0, logs.stderr
        assert logs.stdout.startswith("==> c-1-0 on b: ") and "constructed actor c-1-0" in logs.stdout
    except BaseException:
        launcher.kill()
        launcher.wait(timeout=10)
        raise
    agents = loopback_sshd.session_processes("launcher.agent.host_agent")
    for agent in agents:  # agents that cannot clean up: `down` must reach the workers over SSH itself
        agent.suspend()
    launcher.kill()
    launcher.wait(timeout=10)
    down = subprocess.run(
        [PYTHON, "-m", "launcher.console.cli", "down", str(path)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=60,
    )
    assert down.returncode == 0, down.stderr
    assert "host a: 1/1 worker process(es) gone" in down.stderr and "host b: 1/1" in down.stderr
    for host in ("a", "b"):  # removed over SSH by `down`, the agents being stopped
        assert list((tmp_path / host).glob("curve-*")) == [], f"`down` left the CURVE keys on {host}"
    for agent in agents:
        agent.resume()
    assert wait_no_sessions(loopback_sshd) == []
