"""The asynchronous demo end to end: `miles-launch examples/async-demo.toml` with a few iterations; its last
job line is ``RESULT {json}``, as the synchronous demo's (tests/e2e/test_demo_job.py checks that one)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_demo_job import LAUNCH, ROOT, ROW, left_behind, marked_env

pytestmark = pytest.mark.processes

EXAMPLE = ROOT / "examples" / "async-demo.toml"
KEYS = {"iterations", "reward_first", "reward_last", "engine_busy_fraction", "max_staleness_seen",
        "samples_dropped_stale", "samples_retried", "samples_lost",
        # the trainer's drift metrics (actors/trainer/objectives.py), run means
        "train_rollout_logprob_abs_diff", "mismatch_k3_kl", "ess_ratio", "tis_clipfrac", "entropy",
        "grad_norm"}  # fmt: skip


def result_of(stdout: str) -> dict:
    """The RESULT line, which must be the job's last line of output."""
    job_lines = [line for line in stdout.splitlines() if line.strip() and not line.startswith("[miles-launch")]
    assert job_lines and job_lines[-1].startswith("RESULT "), stdout[-3000:]
    return json.loads(job_lines[-1].removeprefix("RESULT "))


def test_async_demo_runs_and_ends_with_its_result_line(tmp_path: Path) -> None:
    env, marker = marked_env()
    text = re.sub(r"(?m)^iterations = \d+", "iterations = 4", EXAMPLE.read_text())
    text = text.replace('workdir = "../runs/async-demo"', f'workdir = "{tmp_path / "launch"}"')
    text = text.replace('workdir = "../runs/hosts/async-demo"', f'workdir = "{tmp_path / "host"}"')
    text = text.replace('python = "../.venv/bin/python"', f'python = "{sys.executable}"')
    config = tmp_path / "async.toml"
    config.write_text(text)
    result = subprocess.run([*LAUNCH, str(config)], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert result.returncode in (0, 1), (result.stdout + result.stderr)[-4000:]  # 1: reward flat in 4 iterations
    assert len([line for line in result.stdout.splitlines() if ROW.match(line)]) == 4, result.stdout
    figures = result_of(result.stdout)
    assert KEYS <= set(figures) and figures["mode"] == "async" and figures["iterations"] == 4
    assert figures["samples_lost"] == 0 and 0 < figures["engine_busy_fraction"] <= 1
    assert figures["max_staleness_seen"] <= 1  # the example's max_staleness
    # the engines sample with the trainer's weights, one version behind at most: close, not identical
    assert 0 <= figures["train_rollout_logprob_abs_diff"] < 1.0 and 0 < figures["ess_ratio"] <= 1.0 + 1e-6
    assert "[async] objective ppo_clip with use_tis" in result.stdout
    assert "teardown complete" in result.stderr + result.stdout
    assert not left_behind(marker), "processes left behind"
