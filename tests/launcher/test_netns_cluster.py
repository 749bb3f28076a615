"""A two-host cluster in network namespaces (own sshd each); the launcher runs in a third namespace.

Actors are placed on both hosts and call each other across the bridge; kill -9 of the launcher must leave zero
processes in either host namespace within 10 s; an unreachable address fails within seconds.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import toml_text
from launch_collective import MEMBER
from launch_helpers import PYTHON, NetnsCluster, check_names_across, launch_until_job_runs, ssh_host, subprocess_env
from sshd_fixture import SshKeys

pytestmark = pytest.mark.processes

COUNTER = {"kind": "serve", "actor_class": "launch_actors:Counter", "kwargs": {"start": 1}}


def write(
    tmp_path: Path,
    cluster: NetnsCluster,
    keys: SshKeys,
    job: str,
    extra_hosts: list[dict[str, Any]] = (),
    pool_hosts: list[str] | None = None,
    worker: dict[str, Any] = COUNTER,
    cells: int = 4,
    **launcher: Any,
) -> Path:
    hosts = [ssh_host(name, address, 22, keys, tmp_path / name, gpus=2) for name, _, address in cluster.hosts]
    data = {
        "launcher": {"workdir": str(tmp_path / "run"), "stop_grace_s": 2, "gpu_check": False, **launcher},
        "hosts": [*hosts, *extra_hosts],
        "job": {"entrypoint": job},
        "pools": [
            {
                "id": "c",
                "cells": cells,
                "strategy": "SPREAD",
                "worker": {**worker, "gpus": 0.5},
                **({"hosts": pool_hosts} if pool_hosts else {}),
            }
        ],
    }
    path = tmp_path / "hosts.toml"
    path.write_text(toml_text.dump(data))
    return path


def launcher_argv(cluster: NetnsCluster, config: Path) -> list[str]:
    return [*cluster.exec_argv(), PYTHON, "-m", "launcher.console.cli", str(config)]


def test_actors_on_two_hosts_call_across(netns_cluster: NetnsCluster, ssh_keys: SshKeys, tmp_path: Path) -> None:
    config = write(tmp_path, netns_cluster, ssh_keys, "launch_jobs:cross_calls")
    result = subprocess.run(
        launcher_argv(netns_cluster, config), capture_output=True, text=True, timeout=120, env=subprocess_env()
    )
    assert result.returncode == 0, result.stderr[-3000:]
    cross = json.loads(result.stdout.split("CROSS ", 1)[1].splitlines()[0])
    assert sorted(cross["hosts"]) == ["h1", "h1", "h2", "h2"]
    assert cross["by_handle"] == 6 and cross["by_name"] == 8
    assert {e.rsplit(":", 1)[0] for e in cross["endpoints"]} == {"tcp://10.200.77.11", "tcp://10.200.77.12"}
    # Actors bind 0.0.0.0 on SSH hosts: a caller on the same host uses the wildcard twin, others TCP.
    target, route = cross["routes"]["same_host"]
    assert route == f"ipc://@miles-tcp-*:{target.rsplit(':', 1)[1]}"
    for kind in ("cross_host", "from_launcher"):  # another network namespace: the twin is out of sight
        target, route = cross["routes"][kind]
        assert route == target, kind
    assert "host=h2)" in result.stderr or "host=h2)" in result.stdout
    assert netns_cluster.stray_pids() == {ns: set() for _, ns, _ in netns_cluster.hosts}


def test_collective_group_and_tensor_ref_across_hosts(
    netns_cluster: NetnsCluster, ssh_keys: SshKeys, tmp_path: Path
) -> None:
    """runtime.collective across network namespaces: rank 0's store is dialled at its host's address, gloo pairs
    cross the bridge, and a tensor ref moves from h1's member into h2's buffers."""
    config = write(tmp_path, netns_cluster, ssh_keys, "launch_collective:collective_across", worker=MEMBER, cells=2)
    result = subprocess.run(
        launcher_argv(netns_cluster, config), capture_output=True, text=True, timeout=120, env=subprocess_env()
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.split("COLLECTIVE ", 1)[1].splitlines()[0])
    assert sorted(out["hosts"]) == ["h1", "h2"]
    assert {e.rsplit(":", 1)[0] for e in out["endpoints"]} == {"tcp://10.200.77.11", "tcp://10.200.77.12"}
    assert out["reduced"] == [3.0, 3.0]
    assert out["pulled"] == out["held"] != 0.0
    assert netns_cluster.stray_pids() == {ns: set() for _, ns, _ in netns_cluster.hosts}


def test_named_actors_are_one_name_across_ssh_hosts(
    netns_cluster: NetnsCluster, ssh_keys: SshKeys, tmp_path: Path
) -> None:
    """The launch's name service, reached from each host at the address its SSH connection came from: an actor on
    h1 spawns a named child; an actor on h2 finds and calls it, cannot take its name (ValueError naming the
    holder), gets it with get_if_exists; namespaces scope names; a killed holder's name is taken again from h2."""
    config = write(tmp_path, netns_cluster, ssh_keys, "launch_jobs:names_across")
    result = subprocess.run(
        launcher_argv(netns_cluster, config), capture_output=True, text=True, timeout=180, env=subprocess_env()
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = check_names_across(result.stdout, ["h1", "h2"])
    (_, _, h1_address), (_, _, h2_address) = netns_cluster.hosts
    assert out["child"]["endpoint"].startswith(f"tcp://{h1_address}:")  # named by the address h2 reaches
    assert out["again"]["endpoint"].startswith(f"tcp://{h2_address}:")
    assert "actor name service on every interface" in result.stderr + result.stdout
    assert netns_cluster.stray_pids() == {ns: set() for _, ns, _ in netns_cluster.hosts}


def test_kill9_of_launcher_empties_every_host(netns_cluster: NetnsCluster, ssh_keys: SshKeys, tmp_path: Path) -> None:
    marker = tmp_path / "marker.json"
    config = write(tmp_path, netns_cluster, ssh_keys, "launch_jobs:wait_forever")
    launcher = launch_until_job_runs(launcher_argv(netns_cluster, config), marker, timeout_s=90)
    before = netns_cluster.stray_pids()
    assert all(len(pids) >= 3 for pids in before.values()), before  # sshd session + agent + 2 workers each
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=5)
    killed = time.monotonic()
    while any(netns_cluster.stray_pids().values()) and time.monotonic() - killed < 10:
        time.sleep(0.1)
    assert netns_cluster.stray_pids() == {ns: set() for _, ns, _ in netns_cluster.hosts}, "orphans on a host"


def test_unreachable_host_fails_within_seconds(netns_cluster: NetnsCluster, ssh_keys: SshKeys, tmp_path: Path) -> None:
    ghost = ssh_host("ghost", "10.200.77.99", 22, ssh_keys, tmp_path / "ghost", gpus=2)
    config = write(
        tmp_path,
        netns_cluster,
        ssh_keys,
        "launch_jobs:exit_code",
        extra_hosts=[ghost],
        pool_hosts=["ghost", "h1"],
        connect_timeout_s=2,
    )
    started = time.monotonic()
    result = subprocess.run(
        launcher_argv(netns_cluster, config), capture_output=True, text=True, timeout=60, env=subprocess_env()
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    assert "host 'ghost' (root@10.200.77.99:22): no answer within 2s" in result.stderr
    assert elapsed < 10, elapsed
    assert netns_cluster.stray_pids() == {ns: set() for _, ns, _ in netns_cluster.hosts}


def test_partition_stops_the_cut_off_host_and_is_reported(
    netns_cluster: NetnsCluster, ssh_keys: SshKeys, tmp_path: Path
) -> None:
    marker = tmp_path / "marker.json"
    config = write(tmp_path, netns_cluster, ssh_keys, "launch_jobs:report_deaths", heartbeat_timeout_s=3)
    config.write_text(
        config.read_text().replace(
            'entrypoint = "launch_jobs:report_deaths"',
            'entrypoint = "launch_jobs:report_deaths"\nargs = {timeout_s = 40}',
        )
    )
    launcher = subprocess.Popen(
        launcher_argv(netns_cluster, config),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(MILES_TEST_MARKER=str(marker)),
    )
    _, cut_ns, _ = netns_cluster.hosts[1]
    try:
        deadline = time.monotonic() + 90
        while not marker.exists():
            assert launcher.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        subprocess.run(["ip", "-n", cut_ns, "link", "set", "eth0", "down"], check=True)
        cut = time.monotonic()

        def agent_or_workers() -> list[int]:
            out = []
            for pid in netns_cluster.pids(cut_ns):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    continue
                if "launcher.agent.host_agent" in cmdline or "runtime.worker" in cmdline:
                    out.append(pid)
            return out

        while agent_or_workers() and time.monotonic() - cut < 15:
            time.sleep(0.2)
        assert agent_or_workers() == [], "the cut-off host kept running without its launcher"
        out, err = launcher.communicate(timeout=60)
        assert launcher.returncode == 0, err[-3000:]
        assert "DEATH_SEEN" in out and "lost with its host agent (no heartbeat" in out
        assert "WORKER DIED" in err and "on h2" in err
    finally:
        subprocess.run(["ip", "-n", cut_ns, "link", "set", "eth0", "up"], check=True)
        if launcher.poll() is None:
            launcher.kill()
            launcher.communicate(timeout=10)
    deadline = time.monotonic() + 30  # the stale sshd session on h2 goes once TCP notices the launcher is gone
    while any(netns_cluster.stray_pids().values()) and time.monotonic() < deadline:
        time.sleep(0.2)
