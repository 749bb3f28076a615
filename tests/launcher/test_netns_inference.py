"""Launcher-placed CPU engines on both hosts of the two-namespace cluster, behind the controller's sglang-router.

The engine pool is rendered by actors/inference/engine_pool.py (a command pool: the launcher knows nothing of
SGLang); the controller (on h1) gets the pool's cells from the launcher's provider API
(launcher/launch/provider_service.py) instead of forking engines. kill -9 of the engine on h2 while requests flow
through the router: the launcher reports the death, the controller asks it to restart the cell, the new engine runs on
h2 again (new pid, new port) and is registered with the router, and requests keep succeeding through the router
meanwhile (the engine on h1 serves).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import toml_text
from launch_helpers import PYTHON, NetnsCluster, ssh_host, subprocess_env
from sshd_fixture import SshKeys

from actors.inference.engine_pool import engine_pool
from actors.model_config import ModelConfig
from actors.sglang_config import SGLangConfig

pytestmark = pytest.mark.processes

TINY = ModelConfig(
    hidden_size=32, num_layers=1, num_attention_heads=2, num_key_value_heads=2, ffn_hidden_size=64,
    max_position_embeddings=128, seed=3,
)  # fmt: skip
FAST_ROUTER = {"policy": "round_robin", "health_check_interval_s": 1, "health_failure_threshold": 1}


def inference_pools(*, engines: int = 2, engine_hosts: list[str] | None = None) -> list[dict[str, Any]]:
    """A CPU engine pool SPREAD over the hosts, and the controller (on h1) serving it."""
    sglang = SGLangConfig(model_path="cpu-engine", port=30000)
    pool = engine_pool("engines", engines, sglang, engine="cpu", model=TINY, weight_version="default",
                       strategy="SPREAD", hosts=engine_hosts, ready_deadline_s=120)  # fmt: skip
    controller = {
        "id": "inference",
        "hosts": ["h1"],
        "worker": {
            "kind": "serve",
            "actor_class": "actors.inference.controller:InferenceController",
            "plan_kwargs": ["provider_api"],
            "kwargs": {
                "server_id": "engines",
                "engine": "cpu",
                "engine_pool": "engines",
                "initial_weights": True,
                "router": FAST_ROUTER,
                "health_check_interval_s": 0.5,
                "engine_start_timeout_s": 120,
            },
        },
    }
    return [pool, controller]


def cluster_hosts(tmp_path: Path, cluster: NetnsCluster, keys: SshKeys) -> list[dict[str, Any]]:
    hosts = []
    for name, _, address in cluster.hosts:
        host = ssh_host(name, address, 22, keys, tmp_path / name, gpus=0)
        host["env"] = {**host["env"], "OMP_NUM_THREADS": "1", "MILES_SHM": "0"}
        hosts.append(host)
    return hosts


def launch(cluster: NetnsCluster, keys: SshKeys, tmp_path: Path, entrypoint: str, pools: list[dict[str, Any]],
           args: dict[str, Any] | None = None, **launcher: Any) -> str:  # fmt: skip
    """Run miles-launch with these pools and job on the cluster; its stdout (it must exit 0)."""
    data = {
        "launcher": {"workdir": str(tmp_path / "run"), "stop_grace_s": 3, "start_deadline_s": 180, **launcher},
        "hosts": cluster_hosts(tmp_path, cluster, keys),
        "job": {"entrypoint": entrypoint, "args": args or {}},
        "pools": pools,
    }
    config = tmp_path / "hosts.toml"
    config.write_text(toml_text.dump(data))
    result = subprocess.run(
        [*cluster.exec_argv(), PYTHON, "-m", "launcher.console.cli", str(config)],
        capture_output=True, text=True, timeout=420, env=subprocess_env(MILES_SHM="0"),
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return result.stdout


def test_engine_on_h2_killed_is_replaced_on_h2_while_traffic_goes_on(
    netns_cluster: NetnsCluster, ssh_keys: SshKeys, tmp_path: Path
) -> None:
    out = launch(netns_cluster, ssh_keys, tmp_path, "launch_inference_jobs:engine_failover", inference_pools())
    report = json.loads(out.split("FAILOVER ", 1)[1].splitlines()[0])
    (_, _, h1_address), (_, _, h2_address) = netns_cluster.hosts
    assert sorted(c["host"] for c in report["before"]) == ["h1", "h2"]
    victim, after = report["victim"], report["after"][report["victim"]["index"]]
    assert (after["host"], after["state"], after["restarts"]) == ("h2", "alive", 1)
    assert after["pid"] != victim["pid"] and after["address"] == h2_address
    cell = report["controller_cell"]
    assert cell["restarts"] == 1 and cell["url"] == f"http://{h2_address}:{after['ports']['port']}"
    assert cell["url"] in report["router_workers"] and len(report["router_workers"]) == 2
    assert all(url.startswith((f"http://{h1_address}:", f"http://{h2_address}:")) for url in report["router_workers"])
    (death,) = report["deaths"]
    assert death["host"] == "h2" and death["pid"] == victim["pid"] and "SIGKILL" in death["reason"]
    assert report["ok_during"] >= 1, report  # the router kept serving (the h1 engine) while h2's was replaced
    assert report["failed_during"] == [], report  # sglang-router retries a request the dead engine dropped
    assert report["failed_after"] == [], report
    netns_cluster.assert_no_strays()


def demo_with_engine_pool(
    tmp_path: Path, cluster: NetnsCluster, keys: SshKeys, *, as_actor: bool = False,
    edit: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
) -> tuple[Path, dict[str, Any]]:  # fmt: skip
    """hosts.example.toml's demo on the cluster (test_netns_demo) with its engines a launcher pool SPREAD over h1 and
    h2 that the controller serves; ``edit(data, model)`` changes the config before it is written. Returns the
    config and the engine pool."""
    from test_netns_demo import demo_config, tomllib

    config = demo_config(tmp_path, cluster, keys)
    data = tomllib.loads(config.read_text())
    inference = next(pool for pool in data["pools"] if pool["id"] == "inference")
    model = inference["worker"]["kwargs"]["model"]
    sglang = SGLangConfig(model_path="cpu-engine", port=30000)
    engines = engine_pool("engines", 2, sglang, engine="cpu", model=ModelConfig(**model), strategy="SPREAD",
                          ready_deadline_s=120, as_actor=as_actor)  # fmt: skip
    inference["worker"]["plan_kwargs"] = ["provider_api"]
    kwargs = inference["worker"]["kwargs"]
    del kwargs["num_engines"]
    kwargs.update(engine_pool="engines", server_id="engines")
    data["pools"].append(engines)
    if edit is not None:
        edit(data, model)
    config.write_text(toml_text.dump(data))
    return config, engines


def test_demo_job_with_launcher_placed_engines_on_both_hosts(
    netns_cluster: NetnsCluster, ssh_keys: SshKeys, tmp_path: Path
) -> None:
    """hosts.example.toml's demo with its engines as a launcher pool SPREAD over h1 and h2 (the trainer pushes
    weights to both hosts' engines, the rollout generates through the router on h1): the reward must rise."""
    from test_netns_demo import ITERATIONS, ROW

    config, _ = demo_with_engine_pool(tmp_path, netns_cluster, ssh_keys)
    result = subprocess.run(
        [*netns_cluster.exec_argv(), PYTHON, "-m", "launcher.console.cli", str(config), "--no-logs"],
        capture_output=True, text=True, timeout=300, env=subprocess_env(MILES_SHM="0"),
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    (_, _, h1_address), (_, _, h2_address) = netns_cluster.hosts
    urls = re.search(r"\[demo\] engines: (\[.*?\])", result.stdout)
    assert urls and {u.split("//")[1].split(":")[0] for u in json.loads(urls.group(1).replace("'", '"'))} == {
        h1_address,
        h2_address,
    }, result.stdout
    rows = [m for m in (ROW.match(line) for line in result.stdout.splitlines()) if m]
    assert [int(m.group(1)) for m in rows] == list(range(1, ITERATIONS + 1)), result.stdout
    rewards = [float(m.group(3)) for m in rows]
    assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.02, f"reward did not rise: {rewards}"
    netns_cluster.assert_no_strays()


def test_demo_over_refs_with_launcher_placed_engine_actors_across_hosts(
    netns_cluster: NetnsCluster, ssh_keys: SshKeys, tmp_path: Path
) -> None:
    """The demo with ``weight_sync = "refs"``: its engines a launcher pool of CPUEngineActor SPREAD over h1 and h2
    (engine_pool(..., as_actor=True)), so trainer rank 0 on h1 and the engines form a gloo group across the
    bridge and every update is pulled over it. The engine on h2 is then SIGKILLed: the launcher restarts it on h2,
    the controller finds the new actor by its worker id, and the next update forms the group again with it. The
    engines must equal the trainer's checkpoint after the loop and after that update."""
    from test_netns_demo import ROW

    iterations = 2  # two updates over the group; the reward's rise is the other tests' to show

    def refs_job(data: dict[str, Any], model: dict[str, Any]) -> None:
        args = {**data["job"]["args"], "iterations": iterations, "weight_sync": "refs", "check_model": model}
        data["job"] = {"entrypoint": "launch_inference_jobs:refs_demo", "args": args}

    config, engines = demo_with_engine_pool(tmp_path, netns_cluster, ssh_keys, as_actor=True, edit=refs_job)
    assert engines["worker"]["kind"] == "serve" and "--port" in engines["worker"]["kwargs"]["argv"]
    result = subprocess.run(
        [*netns_cluster.exec_argv(), PYTHON, "-m", "launcher.console.cli", str(config), "--no-logs"],
        capture_output=True, text=True, timeout=360, env=subprocess_env(MILES_SHM="0"),
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode in (0, 1), output[-6000:]  # 1: the reward did not rise (asserted by the tests above)
    assert "initial weights pushed to the engines over collective refs" in result.stdout, output[-6000:]
    rows = [m for m in (ROW.match(line) for line in result.stdout.splitlines()) if m]
    assert [int(m.group(1)) for m in rows] == list(range(1, iterations + 1)), result.stdout
    report = json.loads(result.stdout.split("REFS ", 1)[1].splitlines()[0])
    (_, _, h1_address), (_, _, h2_address) = netns_cluster.hosts
    hosts = {url.split("//")[1].split(":")[0] for url in report["after_loop"]}
    assert hosts == {h1_address, h2_address}, report
    assert all(report["after_loop"].values()) and len(report["after_loop"]) == 2, report
    replaced = report["replaced"]
    assert replaced["pid"] != report["victim"]["pid"] and replaced["url"].startswith(f"http://{h2_address}:"), report
    assert report["group_after_restart"] == "demo-weights-0", report  # a new WeightSync formed its own group
    assert all(report["after_restart"].values()) and len(report["after_restart"]) == 2, report
    assert report["versions"] == ["after-restart", "after-restart"], report
    netns_cluster.assert_no_strays()
