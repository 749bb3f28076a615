"""The demo's Hugging Face variant: hosts.example.toml with its `# hf:` lines taken, on a checkpoint made locally.

What a user does (README, "Hugging Face checkpoints"): uncomment every ``# hf:`` line with a model directory and
delete the lines they replace. The job then trains that checkpoint (TrainerConfig.model_path), the CPU engines
serve it (``--model-path``) and the rollout encodes the text prompts with its tokenizer. Two iterations of a random
tiny model need not raise the reward, so the job may end 1 with the demo's "did not rise" message; every iteration
must run (generate, train, push) and the launch must leave nothing behind.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hf_fixtures import make_checkpoint

from tests.e2e.test_demo_job import ROOT, ROW, left_behind, marked_env, small_config

pytestmark = pytest.mark.processes

PLACEHOLDER = "/models/Qwen2.5-0.5B-Instruct"


def hf_variant(tmp_path: Path, model_dir: Path) -> Path:
    """hosts.example.toml with the variant taken as its comment says, a short run and its own directories."""
    config = small_config(tmp_path, iterations=2)
    text = config.read_text()
    assert text.count(f'# hf: model_path = "{PLACEHOLDER}"') == 3 and text.count("# hf: ") == 5
    text = re.sub(r"(?m)^model = \{.*\}\n", "", text)
    text = re.sub(r'(?m)^reward_fn = "actors\.demo\.task:shaped_copy_reward"\n', "", text)
    text = re.sub(r"(?m)^# hf: ", "", text).replace(PLACEHOLDER, str(model_dir))
    text = re.sub(r"(?m)^prompts_per_iteration = \d+", "prompts_per_iteration = 4", text)
    text = re.sub(r"(?m)^samples_per_prompt = \d+", "samples_per_prompt = 4", text)
    config.write_text(text)
    return config


def test_demo_runs_on_a_hugging_face_checkpoint(tmp_path: Path) -> None:
    model_dir = make_checkpoint("qwen2", tmp_path / "qwen2", seed=3)
    config = hf_variant(tmp_path, model_dir)
    env, marker = marked_env()
    result = subprocess.run([sys.executable, "-m", "launcher.console.cli", str(config)], capture_output=True, text=True,
                            timeout=600, cwd=ROOT, env=env)  # fmt: skip
    output = result.stdout + result.stderr
    rows = [m for m in (ROW.match(line) for line in result.stdout.splitlines()) if m]
    assert [int(m.group(1)) for m in rows] == [1, 2], output[-4000:]
    assert result.returncode == 0 or (result.returncode == 1 and "the reward did not rise" in output), output[-4000:]
    assert "teardown complete" in output
    assert not left_behind(marker), "processes left behind"
