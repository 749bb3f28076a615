"""An asynchronous run without a behaviour correction is refused before anything starts (miles-launch's checks run the
job's own: actors/demo/async_loop.py refuse_uncorrected_before_start over the pools' kwargs), with a message naming
the objective's options that correct it (the trainer's ``objective`` in actors/trainer/objective_config.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_async_demo import EXAMPLE
from tests.e2e.test_demo_job import LAUNCH, ROOT, left_behind, marked_env

pytestmark = pytest.mark.processes


def test_uncorrected_async_run_is_refused_at_start(tmp_path: Path) -> None:
    env, marker = marked_env()
    text = re.sub(r"(?m)^objective = .*\n", "", EXAMPLE.read_text())  # the trainer's default: plain REINFORCE
    assert "objective = " not in text
    text = text.replace('workdir = "../runs/async-demo"', f'workdir = "{tmp_path / "launch"}"')
    text = text.replace('workdir = "../runs/hosts/async-demo"', f'workdir = "{tmp_path / "host"}"')
    text = text.replace('python = "../.venv/bin/python"', f'python = "{sys.executable}"')
    config = tmp_path / "uncorrected.toml"
    config.write_text(text)
    result = subprocess.run([*LAUNCH, str(config), "--no-logs"], capture_output=True, text=True, timeout=240,
                            cwd=ROOT, env=env)  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-4000:]
    refusal = next((line for line in output.splitlines() if "OffPolicyRefused: " in line), "")
    assert "max_staleness = 1" in refusal and "objective.use_tis = true" in refusal, output[-4000:]
    assert "allow_uncorrected_off_policy = true" in refusal, refusal
    assert "found before starting anything" in output and "connecting to" not in output  # nothing started
    assert not left_behind(marker), "processes left behind"
