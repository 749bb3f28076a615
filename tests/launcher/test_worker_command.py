"""Spawn commands: argv/env from spec + placement + ports; plan env; templates."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.agent import agent_protocol as proto
from launcher.config.hosts_config import HostConfig
from launcher.config.placement import plan_placement
from launcher.config.specs import CommandWorkerSpec, PoolSpec, ServeWorkerSpec
from launcher.launch.worker_command import build_spawn, port_counts


def _setup(spec: ServeWorkerSpec | CommandWorkerSpec, provider: str = "ssh") -> tuple[HostConfig, object]:
    address = "localhost" if provider == "local" else "10.0.0.5"
    host = HostConfig(
        name="h", address=address, provider=provider, gpus=4, python="/py", workdir=Path("/w"), env={"A": "host"}
    )
    pool = PoolSpec(id="eng", cells=1, workers_per_cell=2, worker=spec)
    plan = plan_placement([host], [pool])
    return host, plan.workers()[1]


def test_serve_worker_spawn() -> None:
    spec = ServeWorkerSpec(actor_class="m:C", gpus=2, env={"B": "spec"})
    host, placement = _setup(spec)
    spawn = build_spawn(
        host, spec, placement, ports={"port": 4000}, master_addr="10.0.0.5", master_port=4001, stream_logs="all"
    )
    assert spawn.argv == ["/py", "-m", "runtime.worker", "--bind", "tcp://0.0.0.0:4000"]
    assert spawn.ready["kind"] == "line" and spawn.ready["prefix"] == proto.READY_PREFIX
    env = spawn.env
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["LOCAL_RANK"] == "1" and env["RANK"] == "1"
    assert env["WORLD_SIZE"] == "2" and env["MASTER_ADDR"] == "10.0.0.5" and env["MASTER_PORT"] == "4001"
    assert env["A"] == "host" and env["B"] == "spec" and env["MILES_WORKER_ID"] == "eng-0-1"
    assert "MILES_ACTOR_REGISTRY" not in env  # names are the launch's name service's (MILES_NAME_SERVICE)
    assert env["MILES_ADVERTISE_HOST"] == "10.0.0.5"  # refs made by a 0.0.0.0-bound actor name a reachable host


def test_advertised_host_can_be_overridden_by_the_host_env() -> None:
    spec = ServeWorkerSpec(actor_class="m:C")
    host, placement = _setup(spec)
    host = host.model_copy(update={"env": {"MILES_ADVERTISE_HOST": "gpu-a.internal"}})
    spawn = build_spawn(host, spec, placement, ports={"port": 1}, master_addr="x", master_port=2, stream_logs="none")
    assert spawn.env["MILES_ADVERTISE_HOST"] == "gpu-a.internal"


def test_local_hosts_bind_loopback() -> None:
    spec = ServeWorkerSpec(actor_class="m:C")
    host, placement = _setup(spec, provider="local")
    spawn = build_spawn(
        host, spec, placement, ports={"port": 1}, master_addr="127.0.0.1", master_port=2, stream_logs="none"
    )
    assert spawn.argv[-1] == "tcp://127.0.0.1:1"
    assert spawn.env["CUDA_VISIBLE_DEVICES"] == ""  # a CPU worker is told: no GPU


def test_command_template_ports_and_readiness() -> None:
    spec = CommandWorkerSpec(
        command="{python} -m server --port {port} --nccl {nccl_port} --dist {master_addr}:{master_port} "
        "--gpus {gpu_ids} --name '{worker_id} x'",
        ports={"port": "worker", "nccl_port": "cell"},
        ready={"kind": "http", "port": "port", "path": "/health", "deadline_s": 7},
        gpus=1,
    )
    assert port_counts(spec) == (["port"], ["nccl_port"])
    host, placement = _setup(spec)
    spawn = build_spawn(
        host,
        spec,
        placement,
        ports={"port": 5000, "nccl_port": 5001},
        master_addr="10.0.0.5",
        master_port=5002,
        stream_logs="all",
    )
    assert spawn.argv == [
        "/py",
        "-m",
        "server",
        "--port",
        "5000",
        "--nccl",
        "5001",
        "--dist",
        "10.0.0.5:5002",
        "--gpus",
        "1",
        "--name",
        "eng-0-1 x",
    ]
    assert spawn.ready == {
        "kind": "http",
        "deadline_s": 7.0,
        "port_number": 5000,
        "path": "/health",
        "probe_host": "127.0.0.1",
    }


def test_curve_dir_is_set_for_every_worker_and_empty_when_off() -> None:
    spec = ServeWorkerSpec(actor_class="m:C", env={"MILES_CURVE_DIR": "/elsewhere"})
    host, placement = _setup(spec)
    on = build_spawn(
        host, spec, placement, ports={"port": 1}, master_addr="x", master_port=2, stream_logs="none", curve_dir="/w/k"
    )
    assert on.env["MILES_CURVE_DIR"] == "/w/k"  # the launch's keys win: both sides must agree
    off = build_spawn(host, spec, placement, ports={"port": 1}, master_addr="x", master_port=2, stream_logs="none")
    assert off.env["MILES_CURVE_DIR"] == ""  # an inherited value cannot turn CURVE on for one side only


def test_the_name_service_is_named_for_every_worker_and_wins_over_any_env() -> None:
    spec = ServeWorkerSpec(actor_class="m:C", env={"MILES_NAME_SERVICE": "elsewhere"})
    host, placement = _setup(spec)
    service = '{"endpoint": "tcp://10.0.0.1:7000", "server_key": null}'
    spawn = build_spawn(
        host, spec, placement, ports={"port": 1}, master_addr="x", master_port=2, stream_logs="none",
        name_service=service,
    )  # fmt: skip
    assert spawn.env["MILES_NAME_SERVICE"] == service


def test_every_worker_gets_the_launchers_session_secret_which_no_repr_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pickled values travel between the processes of one launch (transport.sealed_pickle): its workers share the
    launcher's secret, even over a host's or a pool's env, and a WorkerInfo printed in a log does not show it."""
    from launcher.launch.cells import WorkerInfo
    from transport.session_secret import SECRET_ENV

    monkeypatch.setenv(SECRET_ENV, "ab" * 32)
    spec = ServeWorkerSpec(actor_class="m:C", env={SECRET_ENV: "cd" * 32})
    host, placement = _setup(spec)
    spawn = build_spawn(host, spec, placement, ports={"port": 1}, master_addr="x", master_port=2, stream_logs="none")
    assert spawn.env[SECRET_ENV] == "ab" * 32
    info = WorkerInfo(placement=placement, kind="serve", address="10.0.0.5", ports={"port": 1}, env=spawn.env)
    assert "ab" * 32 not in repr(info)
