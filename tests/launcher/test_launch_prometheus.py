"""Prometheus service discovery served by the launcher: a real Prometheus finds every worker through it (HTTP SD and
file_sd), runtime and user metrics arrive with the launch's labels, a dead worker disappears, a restarted one
comes back.

Prometheus applies discovery changes at most every 5 s (its discovery manager's throttle), so each wait here
takes about that long.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from launch_helpers import local_host, wait_for, write_hosts_toml
from prometheus_server import Prometheus

from launcher.config.hosts_config import load_config, parse_config
from launcher.errors import ConfigError, LauncherError
from launcher.launch.job import JobContext
from launcher.launch.worker_provider import WorkerProvider

pytestmark = pytest.mark.processes

COUNTER = {"kind": "serve", "actor_class": "launch_actors:Counter", "kwargs": {"start": 0}}
JOB = "launch_jobs:exit_code"


def sd_groups(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def by_worker(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {group["labels"]["worker"]: group for group in groups}


def value_of(server: Prometheus, promql: str) -> dict[str, float]:
    """``{worker label: value}`` of an instant query."""
    return {r["metric"].get("worker", ""): float(r["value"][1]) for r in server.query(promql)}


def test_prometheus_finds_every_worker_and_follows_deaths_and_restarts(
    tmp_path: Path, prometheus: Callable[..., Prometheus]
) -> None:
    hosts = [local_host(name, tmp_path / name) for name in ("n0", "n1")]
    path = write_hosts_toml(tmp_path, hosts, [{"id": "c", "cells": 2, "strategy": "SPREAD", "worker": COUNTER}])
    with WorkerProvider(load_config(path)) as provider:
        provider.start_all(deadline_s=60)
        ctx = JobContext(provider.config, provider, {})
        assert ctx.metrics_sd_url == provider.metrics_sd_url and ctx.metrics_sd_url.startswith("http://127.0.0.1:")
        groups = sd_groups(ctx.metrics_sd_url)
        assert json.loads(ctx.metrics_sd_file.read_text()) == groups  # file_sd mirrors HTTP SD
        workers = {w.worker_id: w for w in provider.worker_infos("c")}
        assert by_worker(groups) == {
            wid: {
                "targets": [f"127.0.0.1:{w.metrics_port}"],
                "labels": {"pool": "c", "cell": wid.rsplit("-", 1)[0], "worker": wid, "host": w.host, "miles_job": JOB},
            }
            for wid, w in workers.items()
        }

        server = prometheus(ctx.metrics_sd_url, ctx.metrics_sd_file)
        first, second = provider.handles("c")
        for _ in range(5):
            first.add(1).result(timeout=10)
        for _ in range(3):
            second.add(2).result(timeout=10)
        calls = 'miles_actor_calls_total{job="miles",method="add",outcome="ok"}'
        wait_for(
            "runtime metrics of both workers in Prometheus",
            lambda: value_of(server, calls) == {"c-0-0": 5.0, "c-1-0": 3.0},
            30,
            0.5,
        )
        (series,) = [r for r in server.query(calls) if r["metric"]["worker"] == "c-1-0"]
        labels = series["metric"]
        assert (labels["pool"], labels["cell"], labels["host"], labels["miles_job"]) == ("c", "c-1", "n1", JOB)
        assert labels["actor_class"] == "launch_actors:Counter"
        wait_for(
            "the user metric (launch_counter_value) in Prometheus",
            lambda: value_of(server, 'launch_counter_value{job="miles"}') == {"c-0-0": 5.0, "c-1-0": 6.0},
            30,
            0.5,
        )
        wait_for("both workers found through file_sd", lambda: len(server.active_targets("miles-file")) == 2, 30, 0.5)

        dead = f"127.0.0.1:{workers['c-1-0'].metrics_port}"
        second.crash(3)
        wait_for(
            "the dead worker leaving HTTP SD", lambda: list(by_worker(sd_groups(ctx.metrics_sd_url))) == ["c-0-0"], 10
        )
        assert list(by_worker(json.loads(ctx.metrics_sd_file.read_text()))) == ["c-0-0"]
        wait_for(
            "Prometheus dropping the dead worker's target",
            lambda: [t["labels"]["worker"] for t in server.active_targets("miles")] == ["c-0-0"],
            30,
            0.5,
        )

        restarted = provider.restart_cell("c", 1, deadline_s=60)
        again = by_worker(sd_groups(ctx.metrics_sd_url))
        assert sorted(again) == ["c-0-0", "c-1-0"]
        assert again["c-1-0"]["targets"] == [f"127.0.0.1:{restarted.workers[0].metrics_port}"] != [dead]
        assert restarted.handles[0].add(7).result(timeout=10) == 7
    assert json.loads(ctx.metrics_sd_file.read_text()) == []  # teardown empties the file_sd list


def test_service_discovery_settings(tmp_path: Path) -> None:
    hosts = [local_host("n0", tmp_path / "n0")]
    off = write_hosts_toml(tmp_path, hosts, [{"id": "c", "worker": COUNTER}], metrics_sd_port=-1, curve=False)
    with WorkerProvider(load_config(off)) as provider:
        provider.connect()
        assert provider.metrics_sd_url is None and JobContext(provider.config, provider, {}).metrics_sd_url is None
    with pytest.raises(ConfigError, match=r"launcher.*metrics_sd_port"):
        parse_config(off.read_text().replace("metrics_sd_port = -1", "metrics_sd_port = 70000"))
    with WorkerProvider(load_config(write_hosts_toml(tmp_path, hosts, [], metrics_sd_host="127.0.0.1"))) as first:
        first.connect(["n0"])
        taken = first.services.service_discovery.port
        busy = write_hosts_toml(tmp_path, hosts, [], metrics_sd_port=taken, metrics_sd_host="127.0.0.1")
        with WorkerProvider(load_config(busy)) as second, pytest.raises(LauncherError, match=f"127.0.0.1:{taken}"):
            second.connect(["n0"])


def test_command_workers_with_a_metrics_port_are_listed(tmp_path: Path) -> None:
    http = {
        "kind": "command",
        "command": "{python} -m http.server {port} --bind 127.0.0.1",
        "ready": {"kind": "tcp", "port": "port", "deadline_s": 20},
        "metrics_port": "port",
    }
    plain = {key: value for key, value in http.items() if key != "metrics_port"}
    pools = [{"id": "web", "worker": http}, {"id": "plain", "worker": plain}]
    path = write_hosts_toml(tmp_path, [local_host("n0", tmp_path / "n0")], pools)
    with WorkerProvider(load_config(path)) as provider:
        provider.start_all(deadline_s=60)
        (worker,) = provider.worker_infos("web")
        assert len(provider.worker_infos("plain")) == 1  # runs, but serves no /metrics: not listed
        groups = sd_groups(provider.metrics_sd_url)
        assert groups == [
            {
                "targets": [f"127.0.0.1:{worker.ports['port']}"],
                "labels": {"pool": "web", "cell": "web-0", "worker": "web-0-0", "host": "n0", "miles_job": JOB},
            }
        ]
