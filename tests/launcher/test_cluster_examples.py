"""examples/cluster-2x8gpu*.toml: `miles-launch --dry-run` prints the whole plan on a machine without GPUs or SSH
hosts, the plan is the one the file promises, and the engine commands are what actors/inference/engine_pool.py
renders from their SGLangConfig (so the examples cannot drift from the renderer). The split example gets its router
by default (a pool on the built-in host "launcher", from the controller's pool expander,
actors/inference/router_table.py); the colocated one names an explicit router pool on gpu-b."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from actors.inference.engine_pool import engine_pool
from actors.inference.router_table import router_pool
from actors.sglang_config import SGLangConfig
from launcher.config.hosts_config import load_config
from launcher.config.placement import plan_placement
from launcher.config.pool_expanders import ENTRY_POINT_GROUP
from launcher.launch.worker_command import build_spawn

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
MODEL = "/models/Qwen2.5-7B-Instruct"
ROW = re.compile(
    r"(?m)^\s+((?:trainer|engines|inference|rollout|router|inference-router)-\d+-\d+)\s+(gpu-[ab]|launcher)\s+(\S+)"
    r"\s+([0-9.]+)\s"
)


def dry_run(name: str) -> dict[str, tuple[str, str, str]]:
    result = subprocess.run(
        [sys.executable, "-m", "launcher.console.cli", str(EXAMPLES / name), "--dry-run"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "sglang.launch_server" in result.stdout and "security: CURVE" in result.stdout
    return {worker: (host, gpus, share) for worker, host, gpus, share in ROW.findall(result.stdout)}


@pytest.mark.processes
def test_split_example_plans_trainer_on_one_host_and_four_tp2_engines_on_the_other() -> None:
    plan = dry_run("cluster-2x8gpu.toml")
    assert len(plan) == 8 + 4 + 2 + 1
    assert [plan[f"trainer-0-{r}"] for r in range(8)] == [("gpu-a", str(g), "1") for g in range(8)]
    assert [plan[f"engines-{c}-0"] for c in range(4)] == [("gpu-b", f"{2 * c},{2 * c + 1}", "1") for c in range(4)]
    assert plan["inference-0-0"][0] == plan["rollout-0-0"][0] == "gpu-a"
    assert plan["inference-router-0-0"] == ("launcher", "-", "0")  # by default on the launcher's own machine


def test_the_controller_pool_expander_is_registered_by_the_installed_package() -> None:
    """pyproject.toml's entry point, as `pip install -e .` (scripts/setup.sh) installs it."""
    (point,) = [p for p in entry_points(group=ENTRY_POINT_GROUP) if "InferenceController" in p.name]
    assert (point.name, point.value) == (
        "actors.inference.controller.InferenceController",
        "actors.inference.router_table:expand_controller_pool",
    )


def test_split_example_gets_the_default_router_pool_on_the_built_in_launcher_host() -> None:
    config = load_config(EXAMPLES / "cluster-2x8gpu.toml")
    launcher_host = config.host("launcher")
    assert (launcher_host.provider, launcher_host.address, launcher_host.gpu_ids) == ("local", "localhost", ())
    assert launcher_host.python == sys.executable and launcher_host.env == {}
    assert launcher_host.workdir == ROOT / "examples/runs/cluster-2x8gpu/launcher-host"
    assert config.pool("inference").worker.kwargs["router_pool"] == "inference-router"
    pool = config.pool("inference-router")
    assert pool == type(pool).model_validate(router_pool("inference-router", hosts=["launcher"]))
    assert [p.id for p in config.pools] == ["trainer", "engines", "inference", "rollout", "inference-router"]


def test_colocated_example_router_pool_is_what_the_renderer_makes_and_the_controller_uses_it() -> None:
    config = load_config(EXAMPLES / "cluster-2x8gpu-colocated.toml")
    assert [h.name for h in config.hosts] == ["gpu-a", "gpu-b"]  # no pool names "launcher": no such host
    rendered = router_pool("router", hosts=["gpu-b"])
    pool = config.pool("router")
    assert pool.hosts == ("gpu-b",) and pool.cells == 1
    worker = pool.worker.model_dump(mode="json", exclude={"stop_grace_s", "kind", "metrics_port"})
    expected = {**rendered["worker"]}
    expected.pop("kind")
    expected["ready"] = {**expected["ready"], "probe_host": "127.0.0.1"}
    assert {k: worker[k] for k in expected} == expected
    assert config.pool("inference").worker.kwargs["router_pool"] == "router"


@pytest.mark.processes
def test_colocated_example_shares_every_gpu_between_a_trainer_rank_and_an_engine() -> None:
    plan = dry_run("cluster-2x8gpu-colocated.toml")
    for rank in range(16):
        trainer, engine = plan[f"trainer-0-{rank}"], plan[f"engines-{rank}-0"]
        assert trainer == engine and trainer[2] == "0.5", (rank, trainer, engine)
    assert plan["router-0-0"] == ("gpu-b", "-", "0") and "inference-router-0-0" not in plan
    assert sorted({(h, g) for h, g, _ in plan.values() if g != "-"}) == sorted(
        (h, str(g)) for h in ("gpu-a", "gpu-b") for g in range(8)
    )


@pytest.mark.parametrize(
    ("name", "sglang"),
    [
        ("cluster-2x8gpu.toml", SGLangConfig(model_path=MODEL, port=30000, tp_size=2, mem_fraction_static=0.8)),
        (
            "cluster-2x8gpu-colocated.toml",
            SGLangConfig(model_path=MODEL, port=30000, mem_fraction_static=0.4, enable_memory_saver=True),
        ),
    ],
)
def test_example_engine_pools_are_what_the_renderer_makes(name: str, sglang: SGLangConfig) -> None:
    config = load_config(EXAMPLES / name)
    pool = config.pool("engines")
    rendered = engine_pool("engines", pool.cells, sglang, ready_deadline_s=900)["worker"]
    worker = pool.worker.model_dump(mode="json", exclude={"stop_grace_s", "kind"})
    expected = {k: v for k, v in rendered.items() if k not in ("gpus", "kind")}
    expected["ready"] = {**expected["ready"], "probe_host": "127.0.0.1"}
    assert worker["command"] == expected["command"]
    assert {k: worker[k] for k in ("ports", "ready", "metrics_port")} == {
        k: expected[k] for k in ("ports", "ready", "metrics_port")
    }


def test_a_two_node_engine_gets_node_rank_and_node_0s_dist_init_address() -> None:
    """SGLang's multi-node launch (server_args.py: --nnodes, --node-rank, --dist-init-addr): one worker per node,
    SPREAD over the hosts, node 0's host and the cell's port as dist-init address, tp_size / nnodes GPUs each."""
    sglang = SGLangConfig(model_path=MODEL, port=1, tp_size=16, nnodes=2, dist_init_addr="x:1")
    config = load_config(EXAMPLES / "cluster-2x8gpu.toml")
    pool_table = engine_pool("big", 1, sglang)
    assert (pool_table["workers_per_cell"], pool_table["strategy"], pool_table["worker"]["gpus"]) == (2, "SPREAD", 8)
    pool = type(config.pools[0]).model_validate(pool_table)
    (cell,) = plan_placement(config.hosts, [pool]).cells("big")
    argvs = []
    for placement in cell.workers:
        spawn = build_spawn(
            config.host(placement.host), pool.worker, placement, ports={"port": 30001, "nccl_port": 30002},
            master_addr="10.0.0.11", master_port=29500, stream_logs="warnings", curve_dir=None, name_service="{}",
        )  # fmt: skip
        argvs.append(spawn.argv)
        assert spawn.env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, range(8)))
    assert [w.host for w in cell.workers] == ["gpu-a", "gpu-b"]
    for rank, argv in enumerate(argvs):
        flags = dict(zip(argv[3::2], argv[4::2], strict=False))
        assert argv[1:3] == ["-m", "sglang.launch_server"]
        assert flags["--node-rank"] == str(rank) and flags["--nnodes"] == "2" and flags["--tp-size"] == "16"
        assert flags["--dist-init-addr"] == "10.0.0.11:29500" and flags["--base-gpu-id"] == "0"


def test_engine_actor_pools_validate_and_carry_the_commands_flags() -> None:
    """engine_pool(..., as_actor=True): a serve pool of CPUEngineActor whose argv are the CPU engine command's
    flags but for the address (every interface, a free port the actor binds); SGLang and launcher values refused."""
    from actors.cpu_engine.cli import parse_args
    from actors.model_config import ModelConfig

    model = ModelConfig(hidden_size=32, num_layers=1, num_attention_heads=2, num_key_value_heads=2,
                        ffn_hidden_size=64, max_position_embeddings=64)  # fmt: skip
    sglang = SGLangConfig(model_path="cpu-engine", port=30000)
    table = engine_pool("engines", 2, sglang, engine="cpu", model=model, weight_version="w0", as_actor=True)
    config = load_config(EXAMPLES / "cluster-2x8gpu.toml")
    pool = type(config.pools[0]).model_validate(table)
    assert pool.worker.kind == "serve" and pool.worker.actor_class == "actors.cpu_engine.engine_actor:CPUEngineActor"
    args = parse_args(pool.worker.kwargs["argv"])
    command = engine_pool("engines", 2, sglang, engine="cpu", model=model, weight_version="w0")["worker"]["command"]
    assert (args.host, args.port, args.weight_version) == ("0.0.0.0", 0, "w0")
    assert ModelConfig.model_validate_json(args.model_config) == model and "--weight-version w0" in command
    with pytest.raises(ValueError, match="only the CPU engine runs as an actor"):
        engine_pool("engines", 1, sglang, engine="sglang", as_actor=True)
    with pytest.raises(ValueError, match="take no launcher values"):
        engine_pool("engines", 1, sglang, engine="cpu", bind="{host}", as_actor=True)
