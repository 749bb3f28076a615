"""A trainer rank's death during an async run, then ``resume = true``: the run stops naming the rank and the last
checkpoint, and the next launch continues from that checkpoint (weights and optimizer state through the trainer's
save/load_checkpoint, the weight version and the rollout's data position through actors/demo/run_state.py).
Mirrors miles' ``train_async.py`` (``save_model`` every ``save_interval``; ``--load`` / ``start_rollout_id``)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.test_async_demo import EXAMPLE, result_of
from tests.e2e.test_demo_job import LAUNCH, ROOT, ROW, left_behind, marked_env

pytestmark = pytest.mark.processes

# The kill comes right after iteration 2 (the rank's pid is looked up at iteration 1: a lookup takes seconds on a
# loaded machine, longer than the rest of a run of 5 iterations); the resumed run does the rest.
ITERATIONS = 8


def config_for(tmp_path: Path, *, resume: bool) -> Path:
    text = re.sub(r"(?m)^iterations = \d+", f"iterations = {ITERATIONS}", EXAMPLE.read_text())
    extra = f'checkpoint_dir = "{tmp_path / "ckpt"}"\ncheckpoint_every = 1\nresume = {str(resume).lower()}\n'
    text = text.replace('in_flight = "finish"\n', 'in_flight = "finish"\n' + extra)
    # the KL to the reference model as a metric: the reference goes into the checkpoints and comes back on resume
    text = text.replace("tis_clip = 2.0 }", "tis_clip = 2.0, log_ref_kl = true }")
    assert "log_ref_kl = true" in text
    text = text.replace('workdir = "../runs/async-demo"', f'workdir = "{tmp_path / "launch"}"')
    text = text.replace('workdir = "../runs/hosts/async-demo"', f'workdir = "{tmp_path / "host"}"')
    text = text.replace('python = "../.venv/bin/python"', f'python = "{sys.executable}"')
    config = tmp_path / f"async-{resume}.toml"
    config.write_text(text)
    return config


def trainer_pid(config: Path, worker: str) -> int:
    status = subprocess.run([*LAUNCH, "status", str(config), "--json"], capture_output=True, text=True, timeout=30,
                            cwd=ROOT)  # fmt: skip
    return int(json.loads(status.stdout)["hosts"]["local"][worker]["pid"])


def test_a_dead_trainer_rank_stops_the_run_and_resume_continues_from_its_checkpoint(tmp_path: Path) -> None:
    env, marker = marked_env()
    config = config_for(tmp_path, resume=False)
    proc = subprocess.Popen([*LAUNCH, str(config), "--no-logs"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=ROOT, env=env)  # fmt: skip
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 200
        victim = None
        for line in proc.stdout:
            seen.append(line)
            if (m := ROW.match(line)) and int(m.group(1)) == 1:
                victim = trainer_pid(config, "trainer-0-1")
            if ((m := ROW.match(line)) and int(m.group(1)) == 2) or time.monotonic() > deadline:
                break
        assert victim is not None and any(ROW.match(line) for line in seen), "".join(seen[-30:])
        os.kill(victim, signal.SIGKILL)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    output = "".join(seen) + rest
    assert proc.returncode != 0, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("actors.demo.async_loop.TrainerFailed")]
    assert errors, output[-4000:]
    error = errors[0]
    assert "rank 1: ActorDied" in error and "trainer-0-1" in error and "SIGKILL" in error, error
    done = int(re.search(r"last checkpoint: \S+iter-(\d+) \(iteration (\d+)\)", error).group(2))  # type: ignore[union-attr]
    assert 1 <= done < ITERATIONS and "resume = true" in error, error
    assert not left_behind(marker), "processes left behind"

    env, marker = marked_env()
    resumed = subprocess.run([*LAUNCH, str(config_for(tmp_path, resume=True))], capture_output=True, text=True,
                             timeout=300, cwd=ROOT, env=env)  # fmt: skip
    assert resumed.returncode in (0, 1), (resumed.stdout + resumed.stderr)[-4000:]
    assert f"resumed from {tmp_path / 'ckpt'}/iter-{done:06d}: iteration {done} done, weight version v{done}" in (
        resumed.stdout
    ), resumed.stdout
    assert f"trainer step {done} (optimizer state restored)" in resumed.stdout  # one step per iteration
    rows = [int(m.group(1)) for m in map(ROW.match, resumed.stdout.splitlines()) if m]
    assert rows == list(range(done + 1, ITERATIONS + 1)), resumed.stdout
    figures = result_of(resumed.stdout)
    assert figures["samples_lost"] == 0
    # the resumed run reports the drift metrics, and its weights are `done` steps away from the initial reference
    assert figures["ref_kl"] > 0 and figures["train_rollout_logprob_abs_diff"] >= 0 and figures["ess_ratio"] > 0
    assert not left_behind(marker), "processes left behind"
