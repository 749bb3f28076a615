"""CURVE off: actors listen beyond loopback only when hosts.toml opts in, and the launcher says who can call them.

SSH hosts' actors listen on every interface; with ``curve = false`` (or ``--no-curve``) and no
``[launcher] allow_open_binds_without_curve = true`` the launch is refused before any host is contacted (``--dry-run``
too). With the opt-in, or with local hosts only (loopback binds), it starts and warns at start.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from launch_helpers import PYTHON, local_host, ssh_host, subprocess_env, write_hosts_toml
from sshd_fixture import Sshd, SshKeys

import runtime
from launcher.config.hosts_config import check_open_binds, load_config
from launcher.config.placement import plan_placement
from launcher.config.specs import PoolSpec, ServeWorkerSpec
from launcher.errors import ConfigError
from launcher.launch.worker_command import bind_address, build_spawn
from launcher.launch.worker_provider import WorkerProvider

pytestmark = pytest.mark.processes

COUNTER = {"kind": "serve", "actor_class": "launch_actors:Counter", "kwargs": {"start": 10}}
OPT_IN = "allow_open_binds_without_curve"
ANYONE = "any peer that can reach the actors' ports can call any public method of any actor"


def remote(name: str, port: int = 22) -> dict[str, Any]:
    """An SSH [[hosts]] entry at a loopback port (nothing connects to it unless a launch really starts)."""
    return {"name": name, "address": "127.0.0.1", "workdir": f"/tmp/miles-open-binds/{name}", "ssh": {"port": port}}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "launcher.console.cli", *args], capture_output=True, text=True, timeout=60, env=subprocess_env()
    )


@pytest.fixture
def watched_port() -> Iterator[socket.socket]:
    """A listening socket standing in for sshd: a launch that contacts the host shows up as a pending connection."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        yield listener


def contacted(listener: socket.socket) -> bool:
    try:
        connection, _ = listener.accept()
    except BlockingIOError:
        return False
    connection.close()
    return True


def test_curve_off_with_ssh_hosts_needs_the_opt_in(tmp_path: Path) -> None:
    path = write_hosts_toml(tmp_path, [remote("a"), remote("b")], [], curve=False)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    line = path.read_text().splitlines().index("curve = false") + 1
    assert f"{path}:{line}: field 'launcher.curve': CURVE is off (`curve = false` in [launcher])" in message
    assert "ssh host(s) 'a', 'b' would listen on every interface (0.0.0.0)" in message
    assert "any peer that can reach their ports could call any public method of any actor" in message
    assert "remove `curve = false` from [launcher]" in message
    assert f"add `{OPT_IN} = true` to the [launcher] table of {path}" in message

    config = load_config(write_hosts_toml(tmp_path, [remote("a"), remote("b")], [], curve=False, **{OPT_IN: True}))
    assert config.launcher.curve is False and config.launcher.allow_open_binds_without_curve is True
    assert [bind_address(host) for host in config.hosts] == ["0.0.0.0", "0.0.0.0"]
    spec = ServeWorkerSpec(actor_class="m:C")
    plan = plan_placement(config.hosts, [PoolSpec(id="c", worker=spec)])
    (placement,) = plan.workers()
    host = config.host(placement.host)
    spawn = build_spawn(host, spec, placement, ports={"port": 4000}, master_addr="x", master_port=1, stream_logs="none")
    assert spawn.argv[-2:] == ["--bind", "tcp://0.0.0.0:4000"] and spawn.env["MILES_CURVE_DIR"] == ""


def test_curve_on_and_loopback_only_need_no_opt_in(tmp_path: Path) -> None:
    (tmp_path / "on").mkdir()
    on = load_config(write_hosts_toml(tmp_path / "on", [remote("a")], []))
    assert on.launcher.allow_open_binds_without_curve is False and bind_address(on.hosts[0]) == "0.0.0.0"
    local = load_config(write_hosts_toml(tmp_path, [local_host("n0", tmp_path / "n0")], [], curve=False))
    assert bind_address(local.hosts[0]) == "127.0.0.1"
    check_open_binds(local.model_copy(update={"launcher": local.launcher.model_copy(update={"curve": False})}))
    with pytest.raises(ConfigError, match=rf"(?s)CURVE is off \(--no-curve\).*'a'.*drop --no-curve.*{OPT_IN} = true"):
        check_open_binds(
            on.model_copy(update={"launcher": on.launcher.model_copy(update={"curve": False})}),
            curve_off_by="--no-curve",
        )


@pytest.mark.parametrize("how", ["file", "flag"])
def test_cli_refuses_before_contacting_any_host(tmp_path: Path, watched_port: socket.socket, how: str) -> None:
    port = watched_port.getsockname()[1]
    hosts = [remote("a", port), remote("b", port)]
    path = write_hosts_toml(
        tmp_path, hosts, [{"id": "c", "worker": COUNTER}], **({"curve": False} if how == "file" else {})
    )
    flags = ["--no-curve"] if how == "flag" else []
    undo = "drop --no-curve" if how == "flag" else "remove `curve = false` from [launcher]"
    for extra in (["--dry-run"], []):
        result = cli(str(path), *flags, *extra)
        assert result.returncode == 2, result.stderr
        assert "[miles-launch] error: " in result.stderr and "ssh host(s) 'a', 'b'" in result.stderr
        assert undo in result.stderr and f"`{OPT_IN} = true` to the [launcher] table of {path}" in result.stderr
        assert "connecting to" not in result.stderr and "WARNING" not in result.stderr
        assert result.stdout == ""  # no plan either
    assert not contacted(watched_port), "the launcher contacted a host before refusing"


@pytest.mark.parametrize("how", ["file", "flag"])
def test_cli_dry_run_with_the_opt_in_warns_who_can_call(tmp_path: Path, how: str) -> None:
    hosts = [remote("a"), remote("b")]
    settings = {OPT_IN: True, **({"curve": False} if how == "file" else {})}
    path = write_hosts_toml(
        tmp_path, hosts, [{"id": "c", "cells": 2, "strategy": "SPREAD", "worker": COUNTER}], **settings
    )
    result = cli(str(path), "--dry-run", *(["--no-curve"] if how == "flag" else []))
    assert result.returncode == 0, result.stderr
    assert "[miles-launch] WARNING: CURVE is off: actors on a, b listen on every interface (0.0.0.0)" in result.stderr
    assert ANYONE in result.stderr
    assert "bind=0.0.0.0" in result.stdout and "security: none (CURVE off: plain TCP)" in result.stdout


def test_cli_curve_on_prints_no_warning(tmp_path: Path) -> None:
    result = cli(str(write_hosts_toml(tmp_path, [remote("a")], [{"id": "c", "worker": COUNTER}])), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr and "bind=0.0.0.0" in result.stdout


def test_local_launch_with_curve_off_warns_loopback_only(tmp_path: Path) -> None:
    hosts = [local_host("n0", tmp_path / "n0")]
    path = write_hosts_toml(tmp_path, hosts, [{"id": "c", "worker": COUNTER}], job="launch_jobs:security", curve=False)
    result = cli(str(path), "--no-logs")
    assert result.returncode == 0, result.stderr[-3000:]
    warning = next(line for line in result.stderr.splitlines() if "WARNING" in line)
    assert "CURVE is off: actors listen on loopback only (127.0.0.1)" in warning
    assert "only processes on this machine can reach their ports" in warning
    assert "any public method of any actor" in warning
    assert result.stderr.index("WARNING") < result.stderr.index("connecting to 1 host(s)")  # at start
    assert '"curve": false' in result.stdout


def test_ssh_launch_with_the_opt_in_listens_on_every_interface(
    loopback_sshd: Sshd, ssh_keys: SshKeys, tmp_path: Path
) -> None:
    hosts = [ssh_host("a", "127.0.0.1", loopback_sshd.port, ssh_keys, tmp_path / "a")]
    path = write_hosts_toml(tmp_path, hosts, [{"id": "c", "worker": COUNTER}], curve=False, **{OPT_IN: True})
    with WorkerProvider(load_config(path)) as provider:
        provider.start_all(deadline_s=60)
        (handle,) = provider.handles("c")
        port = int(handle.endpoint.rsplit(":", 1)[1])
        listening = {
            conn.laddr.ip
            for conn in psutil.Process(handle.pid).net_connections(kind="tcp")
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port
        }
        assert listening == {"0.0.0.0"}
        plain = runtime.connect(handle.endpoint, curve_dir=None, deadline_s=5)  # no keys needed: that is the risk
        assert plain.add(1).result(timeout=10) == 11
