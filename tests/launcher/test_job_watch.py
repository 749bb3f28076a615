"""A job that hangs is seen and ended (issue 42: no deadline, no line while the job runs, ``status`` without the
job's phase or times and behind the console during construction): ``[job] heartbeat_s`` prints the job's elapsed
time and the time since its last output, ``[job] timeout_s`` ends the launch with 124, and ``status`` shows the
phase, the times and each worker's construction state as the console does (both read the launcher's one record).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from launch_helpers import PYTHON, local_host, subprocess_env, wait_for, write_hosts_toml

pytestmark = pytest.mark.processes

# constructed in 10 s: long enough for a few console lines and status calls (each a Python start) to see it
SLOW = {"kind": "serve", "actor_class": "launch_actors:SlowStart", "kwargs": {"seconds": 10}}
COUNTER = {"kind": "serve", "actor_class": "launch_actors:Counter"}


def status(config: Path) -> dict[str, Any]:
    done = subprocess.run([PYTHON, "-m", "launcher.console.cli", "status", str(config), "--json"], capture_output=True,
                          text=True, timeout=60, env=subprocess_env())  # fmt: skip
    return json.loads(done.stdout) if done.stdout.strip() else {}


@contextlib.contextmanager
def launched(config: Path, **env: str) -> Iterator[subprocess.Popen[str]]:
    """``miles-launch config`` (stdout and stderr together), killed on the way out if it still runs."""
    launcher = subprocess.Popen([PYTHON, "-m", "launcher.console.cli", str(config)], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=subprocess_env(**env))  # fmt: skip
    try:
        yield launcher
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.communicate(timeout=10)


def test_heartbeat_timeout_and_status_of_a_hanging_job(tmp_path: Path) -> None:
    config = write_hosts_toml(tmp_path, [local_host("n0", tmp_path / "n0")], [{"id": "c", "worker": COUNTER}],
                              job="launch_jobs:print_then_hang")  # fmt: skip
    text = config.read_text().replace("[job]\n", "[job]\ntimeout_s = 30\nheartbeat_s = 1\n", 1)
    config.write_text(text)
    marker = tmp_path / "marker.json"
    started = time.monotonic()
    with launched(config, MILES_TEST_MARKER=str(marker)) as launcher:
        wait_for("the job to run", marker.exists, timeout_s=60)
        # The launcher saves its state file on a change of phase and, for output, at most every _SAVE_EVERY_S:
        # status may see the job running a moment before it sees the line the job printed.
        report = wait_for("status to see the job and its output", lambda: (r := status(config)).get("launch", {}).get(
            "job_elapsed_s") is not None and r["launch"].get("last_output_s") is not None and r,
            timeout_s=20)  # fmt: skip
        assert report["running"] and report["launch"]["phase"] == "running job", report
        assert report["launch"]["last_output_s"] is not None and report["launch"]["last_output_s"] < 30, report
        assert report["hosts"]["n0"]["c-0-0"]["state"] == "attached"
        table = subprocess.run([PYTHON, "-m", "launcher.console.cli", "status", str(config)], capture_output=True,
                               text=True, timeout=60, env=subprocess_env()).stdout  # fmt: skip
        assert re.search(r"running; running job for \dm\d\ds \(launch up \dm\d\ds\); job output \dm\d\ds ago", table)
        out, _ = launcher.communicate(timeout=90)
    assert launcher.returncode == 124, out[-3000:]
    assert time.monotonic() - started < 80
    beats = re.findall(r"job running for (\d)m(\d\d)s of its 0m30s timeout; last output (\d)m(\d\d)s ago", out)
    assert len(beats) >= 3, out[-3000:]  # one a second while it hangs
    assert int(beats[-1][1]) > int(beats[0][1])  # the elapsed time moves on; the output stays as old as it is
    assert "error: the job ran past [job] timeout_s = 30s (job running for" in out and "teardown complete" in out


def test_status_shows_construction_as_the_console_counts_it(tmp_path: Path) -> None:
    config = write_hosts_toml(tmp_path, [local_host("n0", tmp_path / "n0")],
                              [{"id": "t", "cells": 2, "worker": SLOW}])  # fmt: skip
    with launched(config) as launcher:
        seen = wait_for("status to show the actors being constructed", lambda: {
            w["state"] for w in status(config).get("hosts", {}).get("n0", {}).values()} == {"constructing"},
            timeout_s=60, interval_s=0.2)  # fmt: skip
        assert seen
        report = status(config)
        assert report["launch"]["phase"] == "starting" and report["launch"]["job_elapsed_s"] is None, report
        out, _ = launcher.communicate(timeout=90)
    assert launcher.returncode == 0, out[-3000:]
    assert "constructing 2 actor(s): t 0/2" in out  # what the console said while status said "constructing"
