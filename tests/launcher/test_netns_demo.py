"""The demo RL job (hosts.example.toml's pools) on the two-host namespace cluster.

Trainer ranks are SPREAD over both hosts, so megatron's gloo collectives cross the bridge; the inference controller
(CPU engines + sglang-router on 127.0.0.1) and the rollout executor share h1 with trainer rank 0 (which posts the
weights to the engines' loopback URLs). Trainer rank 1 on h2 fetches its rollout shard (an object ref) from the
executor on h1, so the executor must advertise its h1 address. The reward must rise and nothing may be left behind.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
import toml_text
from launch_helpers import PYTHON, NetnsCluster, ssh_host, subprocess_env
from sshd_fixture import SshKeys

pytestmark = pytest.mark.processes

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "hosts.example.toml"
ITERATIONS = 6
ROW = re.compile(r"^\s+(\d+)/(\d+)\s+([0-9.]+)\s+(-?[0-9.]+)\s+(\d+)\s")


def demo_config(tmp_path: Path, cluster: NetnsCluster, keys: SshKeys) -> Path:
    """hosts.example.toml's job and pools on the two SSH hosts: trainer SPREAD, inference + rollout on h1."""
    example = tomllib.loads(EXAMPLE.read_text())
    # The hostname resolves to 127.0.0.1 here (and is the same in every namespace), so gloo must be told which
    # interface carries the other ranks; on a real cluster this is the usual GLOO_SOCKET_IFNAME setting too.
    # The namespaces share /dev/shm and the boot id: MILES_SHM=0 keeps payloads on TCP, as between real hosts.
    env = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "eth0", "MILES_SHM": "0"}
    hosts = []
    for name, _, address in cluster.hosts:
        host = ssh_host(name, address, 22, keys, tmp_path / name, gpus=0)
        host["env"] = {**host["env"], **env}
        hosts.append(host)
    pools = {pool["id"]: pool for pool in example["pools"]}
    pools["trainer"]["strategy"] = "SPREAD"
    pools["inference"]["hosts"] = ["h1"]
    pools["rollout"]["hosts"] = ["h1"]
    data = {
        "launcher": {"workdir": str(tmp_path / "run"), "stop_grace_s": 5, "start_deadline_s": 120},
        "hosts": hosts,
        "job": {
            "entrypoint": example["job"]["entrypoint"],
            "args": {**example["job"]["args"], "iterations": ITERATIONS, "plot_path": str(tmp_path / "reward.png")},
        },
        "pools": list(pools.values()),
    }
    path = tmp_path / "hosts.toml"
    path.write_text(toml_text.dump(data))
    return path


def test_demo_job_on_two_hosts(netns_cluster: NetnsCluster, ssh_keys: SshKeys, tmp_path: Path) -> None:
    config = demo_config(tmp_path, netns_cluster, ssh_keys)
    launch = [*netns_cluster.exec_argv(), PYTHON, "-m", "launcher.console.cli", str(config)]
    env = subprocess_env(MILES_SHM="0")
    plan = subprocess.run([*launch, "--dry-run"], capture_output=True, text=True, timeout=180, env=env)  # imports torch
    assert plan.returncode == 0, plan.stderr[-3000:]
    placed = dict(re.findall(r"(?m)^\s+((?:trainer|inference|rollout)-0-\d)\s+(h\d)\s", plan.stdout))
    assert placed == {"trainer-0-0": "h1", "trainer-0-1": "h2", "inference-0-0": "h1", "rollout-0-0": "h1"}, plan.stdout

    result = subprocess.run(  # ~30 s; a cross-host hang surfaces as the trainer's 120 s collective timeout
        [*launch, "--no-logs"], capture_output=True, text=True, timeout=240, cwd=ROOT, env=env
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    rows = [m for m in (ROW.match(line) for line in result.stdout.splitlines()) if m]
    assert [int(m.group(1)) for m in rows] == list(range(1, ITERATIONS + 1)), result.stdout
    rewards = [float(m.group(3)) for m in rows]
    assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.02, f"reward did not rise: {rewards}"
    assert (tmp_path / "reward.png").stat().st_size > 10_000
    assert "teardown complete" in output

    deadline = time.monotonic() + 10
    while any(netns_cluster.stray_pids().values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert netns_cluster.stray_pids() == {ns: set() for _, ns, _ in netns_cluster.hosts}, "processes left on a host"
