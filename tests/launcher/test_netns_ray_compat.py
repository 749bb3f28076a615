"""Ray code across SSH hosts in network namespaces: verl 0.9.1's single controller (RayResourcePool([2, 2]) and a
RayWorkerGroup whose workers join a gloo group in their constructors), unchanged, in a launch's command job that
calls ``ray.init(address="auto")``: one placement group per host, each worker on its bundle's host with its GPU,
verl's master-address task run in bundle 0 on its host, and a gloo all-gather across both hosts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import toml_text
from launch_helpers import HERE, PYTHON, NetnsCluster, ssh_host, subprocess_env
from sshd_fixture import SshKeys
from test_netns_cluster import launcher_argv

pytestmark = pytest.mark.processes


def test_verl_worker_groups_span_two_hosts(netns_cluster: NetnsCluster, ssh_keys: SshKeys, tmp_path: Path) -> None:
    hosts = [ssh_host(name, address, 22, keys=ssh_keys, workdir=tmp_path / name, gpus=2, cpus=8)
             for name, _, address in netns_cluster.hosts]  # fmt: skip
    for host in hosts:  # gloo's ranks advertise the interface that carries the other ranks (as on a real cluster)
        host["env"] = {**host["env"], "GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1"}
    data = {
        "launcher": {"workdir": str(tmp_path / "run"), "stop_grace_s": 2, "gpu_check": False},
        "hosts": hosts,
        "job": {"command": [PYTHON, str(HERE / "ray_verl_driver.py")]},
        "pools": [{"id": "c", "worker": {"kind": "serve", "actor_class": "launch_actors:Counter"}, "hosts": ["h1"]}],
    }
    config = tmp_path / "hosts.toml"
    config.write_text(toml_text.dump(data))
    result = subprocess.run(
        launcher_argv(netns_cluster, config), capture_output=True, text=True, timeout=300, env=subprocess_env()
    )
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    out = json.loads(result.stdout.split("VERL ", 1)[1].splitlines()[0])
    (_, _, h1_address), (_, _, h2_address) = netns_cluster.hosts
    assert out["context"] == "auto" and out["nodes"] == {"h1": h1_address, "h2": h2_address}
    assert out["resources"] == 4.0
    assert out["hosts"] == [["h1", "h1", "h2", "h2"]] * 4  # every rank gathered every rank's host
    assert sorted(out["gpus"][:2]) == ["0", "1"] and sorted(out["gpus"][2:]) == ["0", "1"]
    assert out["master"] == h1_address  # verl's bundle-0 task ran on h1 and named its address
    assert netns_cluster.stray_pids() == {ns: set() for _, ns, _ in netns_cluster.hosts}
