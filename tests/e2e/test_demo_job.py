"""The demo job end to end: `miles-launch hosts.example.toml` with a small iteration count."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from launcher.console.log_filter import record_level

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "hosts.example.toml"
LAUNCH = [sys.executable, "-m", "launcher.console.cli"]
ROW = re.compile(r"^\s+(\d+)/(\d+)\s+([0-9.]+)\s+(-?[0-9.]+)\s+(\d+)\s")


def small_config(tmp_path: Path, iterations: int) -> Path:
    """hosts.example.toml with a short run, its own workdir and plot path."""
    text = EXAMPLE.read_text()
    text = re.sub(r"(?m)^iterations = \d+", f"iterations = {iterations}", text)
    text = text.replace('plot_path = "runs/demo/reward.png"', f'plot_path = "{tmp_path / "reward.png"}"')
    text = text.replace('workdir = "runs/miles-launch"', f'workdir = "{tmp_path / "launch"}"')
    text = text.replace('workdir = "runs/hosts/local"', f'workdir = "{tmp_path / "host"}"')
    text = text.replace('python = ".venv/bin/python"', f'python = "{sys.executable}"')
    text = text.replace('run_dir = "runs/demo/dashboard"', f'run_dir = "{tmp_path / "dashboard"}"')
    config = tmp_path / "hosts.toml"
    config.write_text(text)
    return config


RUN_MARKER = "MILES_TEST_RUN"  # every process a launch starts inherits it, and no process of another run has it


def marked_env() -> tuple[dict[str, str], str]:
    """An environment for ``miles-launch`` carrying a fresh run marker, and the marker."""
    marker = uuid.uuid4().hex
    return {**os.environ, RUN_MARKER: marker}, marker


def left_behind(marker: str) -> list[psutil.Process]:
    """Processes of the run ``marker`` still alive (after giving them 10 s to go); other test runs on the machine
    never count."""
    marked = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(RUN_MARKER) == marker:
                marked.append(proc)
    psutil.wait_procs(marked, timeout=10)
    alive = []
    for proc in marked:
        with contextlib.suppress(psutil.Error):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
    return alive


def test_dry_run_prints_the_plan() -> None:
    result = subprocess.run([*LAUNCH, str(EXAMPLE), "--dry-run"], capture_output=True, text=True, timeout=180,
                            cwd=ROOT)  # fmt: skip
    assert result.returncode == 0, result.stderr
    for expected in ("trainer-0-0", "trainer-0-1", "inference-0-0", "rollout-0-0", "job: actors.demo:main"):
        assert expected in result.stdout


def test_demo_reward_rises_and_nothing_is_left(tmp_path: Path) -> None:
    env, marker = marked_env()
    config = small_config(tmp_path, iterations=8)
    result = subprocess.run([*LAUNCH, str(config)], capture_output=True, text=True, timeout=600,
                            cwd=ROOT, env=env)  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    # The console as a new user sees it: launcher progress and the job's table, no worker INFO records.
    assert "host local: agent pid" in result.stderr and "MILES_ACTOR_READY" not in output
    assert not [line for line in output.splitlines() if record_level(line.partition(") ")[2]) == "INFO"], output
    rows = [ROW.match(line) for line in result.stdout.splitlines()]
    rewards = [float(m.group(3)) for m in rows if m]
    assert len(rewards) == 8, result.stdout
    assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.02, f"reward did not rise: {rewards}"
    assert (tmp_path / "reward.png").stat().st_size > 10_000
    # The demo records its dashboard by default (README: `miles-dashboard runs/demo/dashboard` after the demo).
    steps = (tmp_path / "dashboard" / "steps.jsonl").read_text().splitlines()
    assert len(steps) >= 8 and (tmp_path / "dashboard" / "samples.jsonl").stat().st_size > 0, steps
    last = [line for line in result.stdout.splitlines() if line.strip() and not line.startswith("[miles-launch")][-1]
    assert last.startswith("RESULT {") and '"mode": "sync"' in last and '"engine_busy_fraction"' in last, last
    figures = json.loads(last.removeprefix("RESULT "))
    # the CPU engines sample with the trainer's own weights at temperature 1: their logprobs are the trainer's
    # (actors/trainer/objectives.py mismatch metrics), within float error
    assert figures["train_rollout_logprob_abs_diff"] < 1e-4 and figures["ess_ratio"] == pytest.approx(1.0), figures
    assert "teardown complete" in output
    assert not left_behind(marker), "processes left behind"


def test_demo_with_weight_sync_over_refs(tmp_path: Path) -> None:
    """The two commented lines of hosts.example.toml: engines as actors, weights pulled over a gloo group."""
    config = small_config(tmp_path, iterations=3)
    text = config.read_text().replace('# weight_sync = "refs"', 'weight_sync = "refs"')
    text = text.replace('# launcher = "actors.inference', 'launcher = "actors.inference')
    assert text.count('weight_sync = "refs"') == 2 and 'launcher = "actors.inference.actor_engines' in text
    config.write_text(text)
    result = subprocess.run([*LAUNCH, str(config), "--no-logs"], capture_output=True, text=True, timeout=420,
                            cwd=ROOT)  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode in (0, 1), output[-4000:]  # 1: the reward did not rise in 3 iterations (not asserted)
    assert "initial weights pushed to the engines over collective refs" in result.stdout, output[-4000:]
    rows = [m for m in map(ROW.match, result.stdout.splitlines()) if m]
    assert [int(m.group(1)) for m in rows] == [1, 2, 3], result.stdout
    assert "RESULT {" in result.stdout and "teardown complete" in output


@pytest.mark.parametrize("bad", ["bogus = 1", "iterations = 0"])
def test_bad_demo_settings_fail_before_anything_starts(tmp_path: Path, bad: str) -> None:
    config = small_config(tmp_path, iterations=2)
    config.write_text(config.read_text().replace("iterations = 2", bad))
    result = subprocess.run([*LAUNCH, str(config), "--no-logs"], capture_output=True, text=True, timeout=300,
                            cwd=ROOT)  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    line = 1 + config.read_text().splitlines().index(bad)
    problem = "unknown demo settings ['bogus']; known: [" if "bogus" in bad else "iterations must be at least 1"
    assert f"hosts.toml:{line}: " in output and problem in output, output[-3000:]
    assert "found before starting anything" in output and "connecting to" not in output, output[-3000:]


def test_ctrl_c_mid_loop_stops_everything(tmp_path: Path) -> None:
    env, marker = marked_env()
    config = small_config(tmp_path, iterations=200)
    proc = subprocess.Popen([*LAUNCH, str(config), "--no-logs"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=ROOT, env=env)  # fmt: skip
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 240
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if ROW.match(line) or time.monotonic() > deadline:
                break
        assert any(ROW.match(line) for line in seen), "".join(seen[-30:])
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode != 0
    assert "teardown complete" in rest, rest[-3000:]
    assert not left_behind(marker), "processes left behind"
