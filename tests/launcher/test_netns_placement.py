"""Actors placed at run time across two SSH hosts in network namespaces (launcher/cluster, runtime/placement): an
actor on h1 places one on h2 and calls it; the job places one on h2, kill -9 of it reaches a holder on h1 and
returns its GPU; kill -9 of h2's agent fails the actor h1 placed there and takes h2 out of the cluster."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from launch_helpers import NetnsCluster, subprocess_env
from sshd_fixture import SshKeys
from test_netns_cluster import launcher_argv, write

pytestmark = pytest.mark.processes


def test_actors_placed_across_hosts_and_their_ends(
    netns_cluster: NetnsCluster, ssh_keys: SshKeys, tmp_path: Path
) -> None:
    config = write(tmp_path, netns_cluster, ssh_keys, "launch_jobs:place_across", pool_hosts=["h1"], cells=1)
    result = subprocess.run(
        launcher_argv(netns_cluster, config), capture_output=True, text=True, timeout=180, env=subprocess_env()
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.split("PLACED ", 1)[1].splitlines()[0])
    h2_address = netns_cluster.hosts[1][2]
    assert out["endpoint"].startswith(f"tcp://{h2_address}:")  # where other hosts reach h2
    assert (out["placed"]["host"], out["placed"]["cuda"]) == ("h2", "0")
    assert (out["probe"]["host"], out["probe"]["cuda"]) == ("h2", "1")
    assert out["across"] == out["probe"]  # h1's actor called the job's actor on h2
    assert out["held"]["h2"]["GPU"] == 0.0 and out["held"]["h1"]["GPU"] == 1.5  # the pool holds half of one
    seconds, error = out["killed"]
    assert error.startswith("ActorDied") and seconds < 5, out["killed"]
    assert out["after_kill"]["h2"]["GPU"] == 1.0  # the killed actor's GPU is free again
    seconds, error = out["lost"]
    assert error.startswith("ActorDied") and "lost with its host agent" in error and seconds < 5, out["lost"]
    assert out["nodes"]["h1"] == [True, None] and out["nodes"]["h2"][0] is False
    assert netns_cluster.stray_pids() == {ns: set() for _, ns, _ in netns_cluster.hosts}


def test_a_cut_host_fails_its_actors_and_its_groups_whole(
    netns_cluster: NetnsCluster, ssh_keys: SshKeys, tmp_path: Path
) -> None:
    """A network cut (h2's link down): after [launcher] heartbeat_timeout_s h2 is lost, the actor placed there is
    dead to its holder, the SPREAD group it belonged to fails whole (its h1 actor stopped, its h1 bundle returned),
    and h2 stops everything it ran on its own."""
    marker = tmp_path / "marker.json"
    config = write(
        tmp_path,
        netns_cluster,
        ssh_keys,
        "launch_jobs:placed_then_cut",
        pool_hosts=["h1"],
        cells=1,
        heartbeat_timeout_s=3,
    )
    launcher = subprocess.Popen(
        launcher_argv(netns_cluster, config), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=subprocess_env(MILES_TEST_MARKER=str(marker)),
    )  # fmt: skip
    _, cut_ns, _ = netns_cluster.hosts[1]
    try:
        deadline = time.monotonic() + 90
        while not marker.exists():
            assert launcher.poll() is None and time.monotonic() < deadline, "the launcher ended before the job ran"
            time.sleep(0.1)
        subprocess.run(["ip", "-n", cut_ns, "link", "set", "eth0", "down"], check=True)
        out_text, err = launcher.communicate(timeout=90)
    finally:
        subprocess.run(["ip", "-n", cut_ns, "link", "set", "eth0", "up"], check=False)
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(10)
    assert launcher.returncode == 0, err[-3000:]
    out = json.loads(out_text.split("CUT ", 1)[1].splitlines()[0])
    assert out["hosts"] == ["h1", "h2"]
    h1_error, h2_error = out["errors"]
    assert h2_error and h2_error.startswith("ActorDied") and "lost with its host agent (no heartbeat" in h2_error
    assert h1_error and h1_error.startswith("ActorDied")  # its group failed: the h1 bundle's actor was stopped
    state, reason = out["group"]
    assert state == "FAILED" and "host 'h2' lost" in reason
    assert out["nodes"]["h2"]["alive"] is False
    assert out["nodes"]["h1"]["available"]["CPU"] == out["total"]["h1"]["CPU"]  # the failed group's h1 bundle is back
    netns_cluster.assert_no_strays(timeout_s=20)
