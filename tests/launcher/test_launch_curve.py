"""CURVE on by default: per-launch keys shipped to every host (0600), workers and the launcher use them, a client
without them is refused and nothing of its runs, the keys are gone after teardown; ``curve = false`` opts out."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from launch_helpers import PYTHON, local_host, ssh_host, subprocess_env, write_hosts_toml
from sshd_fixture import Sshd, SshKeys

import runtime
from launcher.config.hosts_config import load_config
from launcher.launch.worker_provider import WorkerProvider
from runtime import ActorDied, ActorHandle
from transport import security

pytestmark = pytest.mark.processes

COUNTER = {"kind": "serve", "actor_class": "launch_actors:Counter", "kwargs": {"start": 10}}
KEY_FILES = {"client.key", "client.key_secret"}  # no actor keys: each actor's secret goes to its stdin only


def key_dirs(root: Path) -> list[Path]:
    return sorted(root.glob("curve-*"))


def assert_private(directory: Path) -> None:
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    assert {p.name for p in directory.iterdir()} == KEY_FILES
    for path in directory.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def assert_outsiders_refused(handle: Any, tmp_path: Path) -> None:
    """No keys, or another cluster's keys: refused; nothing they sent ran (the counter did not move)."""
    before = handle.add(0).result(timeout=10)
    with pytest.raises(ActorDied, match="CURVE"):
        runtime.connect(handle.endpoint, curve_dir=None, deadline_s=5)
    plain = ActorHandle(
        endpoint=handle.endpoint, name="x", class_path="?", boot_id=None, host="", pid=0, curve_dir=None
    )
    with pytest.raises(ActorDied):
        plain.method("add")(1000).result(timeout=10)
    other = security.generate_cluster_keys(tmp_path / "other-cluster").directory
    with pytest.raises(ActorDied):
        runtime.connect(handle.endpoint, curve_dir=other, deadline_s=5, server_key=handle.server_key)
    assert handle.add(0).result(timeout=10) == before, "a call from a client without the keys ran"


def test_local_launch_uses_curve_and_refuses_outsiders(tmp_path: Path) -> None:
    path = write_hosts_toml(tmp_path, [local_host("n0", tmp_path / "n0")], [{"id": "c", "cells": 2, "worker": COUNTER}])
    with WorkerProvider(load_config(path)) as provider:
        provider.start_all(deadline_s=60)
        (launcher_keys,) = key_dirs(tmp_path / "run")
        assert provider.curve_dir == str(launcher_keys.resolve())
        assert_private(launcher_keys)
        (host_keys,) = key_dirs(tmp_path / "n0")
        assert_private(host_keys)
        first, second = provider.handles("c")
        assert first.add(1).result(timeout=10) == 11
        assert first.add_on_peer(second, 5).result(timeout=10) == 15  # worker -> worker with the shipped keys
        assert first.process_health().result(timeout=10)["curve"] is True
        assert first.where().result(timeout=10)["MILES_CURVE_DIR"] == str(host_keys.resolve())
        assert_outsiders_refused(first, tmp_path)
    assert key_dirs(tmp_path / "run") == [] and key_dirs(tmp_path / "n0") == []


def test_ssh_launch_ships_private_keys_and_removes_them(loopback_sshd: Sshd, ssh_keys: SshKeys, tmp_path: Path) -> None:
    hosts = [ssh_host(name, "127.0.0.1", loopback_sshd.port, ssh_keys, tmp_path / name) for name in ("a", "b")]
    pools = [{"id": "c", "cells": 2, "strategy": "SPREAD", "worker": COUNTER}]
    with WorkerProvider(load_config(write_hosts_toml(tmp_path, hosts, pools))) as provider:
        provider.start_all(deadline_s=60)
        for name in ("a", "b"):
            (host_keys,) = key_dirs(tmp_path / name)
            assert host_keys.name.endswith(f"-{name}")
            assert_private(host_keys)
            assert (host_keys / "client.key_secret").read_text() == (
                Path(provider.curve_dir) / "client.key_secret"
            ).read_text()
        on_a, on_b = provider.handles("c")
        assert on_b.where().result(timeout=10)["MILES_HOST"] == "b"
        assert on_a.add_on_peer(on_b, 2).result(timeout=10) == 12
        assert on_b.add_on_named("c-0-0", 3).result(timeout=10) == 13
        assert on_b.process_health().result(timeout=10)["curve"] is True
        assert_outsiders_refused(on_b, tmp_path)
    for root in ("run", "a", "b"):
        assert key_dirs(tmp_path / root) == [], f"CURVE keys left in {root}"


def test_opt_out_runs_plain_tcp(tmp_path: Path) -> None:
    path = write_hosts_toml(
        tmp_path, [local_host("n0", tmp_path / "n0")], [{"id": "c", "worker": COUNTER}], curve=False
    )
    with WorkerProvider(load_config(path)) as provider:
        provider.start_all(deadline_s=60)
        assert provider.curve_dir is None
        (handle,) = provider.handles("c")
        assert handle.process_health().result(timeout=10)["curve"] is False
        assert handle.where().result(timeout=10)["MILES_CURVE_DIR"] == ""
        plain = runtime.connect(handle.endpoint, curve_dir=None, deadline_s=5)  # anyone on the network may call
        assert plain.add(1).result(timeout=10) == 11
        assert key_dirs(tmp_path / "run") == [] and key_dirs(tmp_path / "n0") == []


@pytest.mark.parametrize("flag", [False, True])
def test_cli_curve_default_and_no_curve_flag(tmp_path: Path, flag: bool) -> None:
    path = write_hosts_toml(
        tmp_path, [local_host("n0", tmp_path / "n0")], [{"id": "c", "worker": COUNTER}], job="launch_jobs:security"
    )
    argv = [PYTHON, "-m", "launcher.console.cli", str(path), "--no-logs", *(["--no-curve"] if flag else [])]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=subprocess_env())
    assert result.returncode == 0, result.stderr[-3000:]
    report = result.stdout.split("SECURITY ", 1)[1].splitlines()[0]
    assert '"by_env": 11' in report and '"sd_workers": ["c-0-0"]' in report  # ctx.metrics_sd_url lists the worker
    if flag:
        assert '"curve": false' in report and '"env": ""' in report and '"ctx_curve_dir": null' in report
        assert "CURVE OFF" in result.stderr
    else:
        assert '"curve": true' in report and '"env_matches": true' in report
        assert "CURVE on" in result.stderr
    assert "Prometheus service discovery: http://127.0.0.1:" in result.stderr
    assert key_dirs(tmp_path / "run") == [] and key_dirs(tmp_path / "n0") == []
