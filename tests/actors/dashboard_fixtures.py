"""Run directories for the dashboard tests: written by hand through actors.dashboard.records, or by a real demo.

:func:`write_run` makes a small run directory the way the collector writes one (whole lines through
``encode_line``). :func:`demo_config` is hosts.example.toml with a short run, its own directories, and its
``[dashboard]`` recording to the test's run_dir (actors/dashboard/launch_section.py: the collector and the web
server on the built-in host "launcher").
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from actors.dashboard.records import encode_line, sample_record

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_RUN_DIR = 'run_dir = "runs/demo/dashboard"'  # hosts.example.toml records the dashboard there


def sample(step: int, index: int, reward: float, **extra: Any) -> dict[str, Any]:
    return sample_record(
        step=step, sample_index=index, prompt_ids=[256, 99, 61], response_ids=[97, 98], logprobs=[-0.1, -2.5],
        texts={"prompt": "c=", "response": "ab", "token_texts": ["<256>", "c", "=", "a", "b"]}, reward=reward,
        prompt_index=index // 2, weight_version="v1", **extra,
    )  # fmt: skip


def write_run(run_dir: Path, steps: dict[int, list[float]]) -> Path:
    """A run of ``steps`` (step -> the rewards of its samples), each with a rollout and a trainer record."""
    run_dir.mkdir(parents=True, exist_ok=True)
    samples, metrics = [], []
    for step, rewards in steps.items():
        samples += [encode_line(sample(step, i, r)) for i, r in enumerate(rewards)]
        metrics.append(encode_line({"step": step, "source": "rollout", "rollout_s": 0.5, "tokens_per_s": 100.0,
                                    "cpu": {"host": "local", "cpu_percent": 50.0}}))  # fmt: skip
        metrics.append(encode_line({"step": step, "source": "trainer", "rank": 0, "loss": 0.1 * step,
                                    "train_s": 0.2}))  # fmt: skip
    (run_dir / "samples.jsonl").write_bytes(b"".join(samples))
    (run_dir / "steps.jsonl").write_bytes(b"".join(metrics))
    return run_dir


def demo_config(tmp_path: Path, *, iterations: int, run_dir: Path) -> Path:
    """hosts.example.toml, ``iterations`` long, recording to ``run_dir`` (see the module docstring)."""
    text = (ROOT / "hosts.example.toml").read_text()
    text = re.sub(r"(?m)^iterations = \d+", f"iterations = {iterations}", text)
    text = re.sub(r"(?m)^prompts_per_iteration = \d+", "prompts_per_iteration = 8", text)
    text = re.sub(r"(?m)^samples_per_prompt = \d+", "samples_per_prompt = 4", text)
    text = text.replace('plot_path = "runs/demo/reward.png"', f'plot_path = "{tmp_path / "reward.png"}"')
    text = text.replace('workdir = "runs/miles-launch"', f'workdir = "{tmp_path / "launch"}"')
    text = text.replace('workdir = "runs/hosts/local"', f'workdir = "{tmp_path / "host"}"')
    text = text.replace('python = ".venv/bin/python"', f'python = "{sys.executable}"')
    config = tmp_path / "hosts.toml"
    assert EXAMPLE_RUN_DIR in text and "\n[dashboard]\nenabled = true\n" in text
    config.write_text(text.replace(EXAMPLE_RUN_DIR, f'run_dir = "{run_dir}"'))
    return config
