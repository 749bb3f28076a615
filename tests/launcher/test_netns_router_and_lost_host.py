"""The inference controller on the two-namespace cluster: its router on the launcher's machine by default, restarted
there when it dies, and a lost host whose engines the controller drops while it keeps serving with the rest.

Engines: a CPU engine pool SPREAD over h1 and h2 (actors/inference/engine_pool.py); the controller on h1 finds its
engines, and its router, through the launcher's provider API (launcher/launch/provider_service.py). Its hosts.toml names
no router pool: the controller pool's expander (actors/inference/router_table.py, found by
launcher/config/pool_expanders.py) adds one on the built-in host "launcher", the switch namespace miles-launch runs in.
Requests flow through the router all along. (An explicit router pool: tests/launcher/test_cluster_examples.py.)
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from launch_helpers import NETNS_OCTET, NetnsCluster
from sshd_fixture import SshKeys
from test_netns_inference import inference_pools, launch

pytestmark = pytest.mark.processes


def test_router_on_the_launchers_machine_by_default_is_restarted_there_after_kill_9_and_traffic_resumes(
    netns_cluster: NetnsCluster, ssh_keys: SshKeys, tmp_path: Path
) -> None:
    engines, controller = inference_pools()
    assert "router_pool" not in controller["worker"]["kwargs"]
    out = launch(netns_cluster, ssh_keys, tmp_path, "launch_inference_jobs:router_failover", [engines, controller],
                 args={"router_pool": "inference-router"})  # fmt: skip
    report = json.loads(out.split("ROUTER ", 1)[1].splitlines()[0])
    launcher_address = f"10.200.{NETNS_OCTET}.1"  # the switch namespace's bridge, as h1 reaches the launcher
    before, after, status = report["before"], report["after"], report["status"]
    assert (before["host"], after["host"], after["state"], after["restarts"]) == ("launcher", "launcher", "alive", 1)
    assert report["beside_launcher"] == [True, True]  # both routers ran in miles-launch's own network namespace
    assert after["pid"] != before["pid"] and after["address"] == "127.0.0.1"  # a local host's worker
    assert report["first_url"] == f"http://{launcher_address}:{before['ports']['port']}"  # reached from h1
    assert status["router_url"] == f"http://{launcher_address}:{after['ports']['port']}"  # the new one, there again
    assert status["router_pid"] == after["pid"] and status["router_restarts"] == 1
    engine_urls = sorted(f"http://{c['address']}:{c['ports']['port']}" for c in report["engines"])
    assert report["router_workers"] == engine_urls  # both engines registered with the new router
    (_, _, h1_address), (_, _, h2_address) = netns_cluster.hosts
    assert {url.split("//")[1].split(":")[0] for url in engine_urls} == {h1_address, h2_address}
    assert report["ok_after"] >= 3 and report["failed_after"] == [], report
    (death,) = report["deaths"]
    assert (death["host"], death["pid"], death["cell_id"]) == ("launcher", before["pid"], "inference-router-0")
    netns_cluster.assert_no_strays(timeout_s=30)  # nothing of the router's on h1 or h2


def test_lost_host_h2_engines_are_dropped_and_h1_keeps_serving(
    netns_cluster: NetnsCluster, ssh_keys: SshKeys, tmp_path: Path
) -> None:
    _, cut_ns, _ = netns_cluster.hosts[1]
    try:
        out = launch(netns_cluster, ssh_keys, tmp_path, "launch_inference_jobs:lost_host", inference_pools(),
                     args={"cut_ns": cut_ns}, heartbeat_timeout_s=3)  # fmt: skip
    finally:
        subprocess.run(["ip", "-n", cut_ns, "link", "set", "eth0", "up"], check=False)
    report = json.loads(out.split("LOST ", 1)[1].splitlines()[0])
    (_, _, h1_address), _ = netns_cluster.hosts
    hosts = {cell["index"]: cell["host"] for cell in report["before"]}
    assert sorted(hosts.values()) == ["h1", "h2"]
    states = {hosts[index]: cell for index, cell in enumerate(report["cells"])}
    assert states["h1"]["state"] == "serving" and states["h2"]["state"] == "disposed", report["cells"]
    assert "lost" in states["h2"]["last_error"] and states["h2"]["url"] is None
    assert list(report["lost_hosts"]) == ["h2"] and "heartbeat" in report["lost_hosts"]["h2"]
    assert report["router_workers"] == [states["h1"]["url"]]  # h2's engine deregistered
    assert states["h1"]["url"].startswith(f"http://{h1_address}:")
    assert report["ok_after"] >= 5 and report["failed_after"] == [], report
    h2_cell = next(c for c in report["after"] if c["host"] == "h2")
    # dead (the launcher saw the loss first) or stopped (the controller's failed health checks retired it first)
    assert h2_cell["state"] in ("dead", "stopped") and h2_cell["lost_hosts"] == ["h2"], h2_cell
    assert next(c for c in report["after"] if c["host"] == "h1")["lost_hosts"] == []
    assert all(d["host"] == "h2" for d in report["deaths"]), report["deaths"]  # nothing died on h1
    netns_cluster.assert_no_strays(timeout_s=30)  # h2's stale sshd session goes once TCP notices
