"""examples/two-policies.toml and two-policies-cpu.toml: two policies in one launch, each with its own trainer
group, engine pool, router and weight versions. The GPU example's plan (``--dry-run``, fake GPU ids as in
test_cluster_examples.py) gives each policy's pools their own GPUs; the CPU example runs both GRPO loops with
``miles-launch``, and a SIGKILL of one of policy b's engines (its controller restarts it, as
actors/inference/cell_keeper.py does for any engine) does not stop policy a. Mirrors miles' multi-trainer setup
(radixark/miles ``miles/ray/placement_group.py``: one trainer per policy from ``compute_trainer_configs``, GPUs
counted per policy in ``_compute_trainer_num_gpus``, and ``update_weights(..., trainer_model_id=...)`` updating only
that model's engines and weight version).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from launch_helpers import result_line, run_local_example

from actors.inference.engine_pool import engine_pool
from actors.sglang_config import SGLangConfig
from launcher.config.hosts_config import load_config

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ROW = re.compile(r"(?m)^\s+((?:trainer|engines|inference|rollout)-[ab](?:-router)?-\d+-\d+)\s+(\S+)\s+(\S+)\s")


def test_each_policy_gets_its_own_gpus_engines_router_and_controller_in_the_plan() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "launcher.console.cli", str(EXAMPLES / "two-policies.toml"), "--dry-run"],
        capture_output=True, text=True, timeout=180, cwd=ROOT,  # imports the actor classes: torch, megatron
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    plan = {worker: (host, gpus) for worker, host, gpus in ROW.findall(result.stdout)}
    gpus = {p: {plan[w][1] for w in plan if re.match(f"(trainer|engines)-{p}-", w)} for p in "ab"}
    assert gpus == {"a": {"0", "1", "2", "3"}, "b": {"4", "5", "6", "7"}}
    assert plan["inference-a-router-0-0"] == plan["inference-b-router-0-0"] == ("launcher", "-")
    config = load_config(EXAMPLES / "two-policies.toml")
    for p, model in (("a", "/models/Qwen2.5-1.5B-Instruct"), ("b", "/models/Qwen2.5-0.5B-Instruct")):
        kwargs = config.pool(f"inference-{p}").worker.kwargs
        assert (kwargs["engine_pool"], kwargs["router_pool"]) == (f"engines-{p}", f"inference-{p}-router")
        assert config.pool(f"rollout-{p}").worker.kwargs["controller_name"] == f"inference-{p}-0-0"
        assert config.pool(f"trainer-{p}").worker.kwargs["config"]["model_path"] == model
        sglang = SGLangConfig(model_path=model, port=30000, mem_fraction_static=0.8)
        rendered = engine_pool(f"engines-{p}", 2, sglang, ready_deadline_s=900)["worker"]["command"]
        assert config.pool(f"engines-{p}").worker.command == rendered


def test_a_killed_engine_of_one_policy_does_not_stop_the_other(tmp_path: Path) -> None:
    data = tomllib.loads((EXAMPLES / "two-policies-cpu.toml").read_text())
    data["job"]["args"]["kill_engine"] = "b"
    result, output = run_local_example(data, tmp_path, ROOT)
    assert "RESULT " in result.stdout, output[-5000:]
    report = result_line(result.stdout)["policies"]
    iterations = data["job"]["args"]["iterations"]
    a, b = report["a"], report["b"]
    assert (a["status"], a["iterations"], a["weight_version"]) == ("ok", iterations, f"a-v{iterations}"), report
    assert a["engine_restarts"] == 0 and a["killed_engine_pid"] is None
    assert b["killed_engine_pid"] is not None and b["engine_restarts"] >= 1, report
    assert (b["status"], b["iterations"], b["weight_version"]) == ("ok", iterations, f"b-v{iterations}"), report
    assert result.returncode == 0, output[-3000:]
    assert "[policy b] killed engine" in result.stdout
