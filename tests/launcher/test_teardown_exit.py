"""Once its teardown is complete the launcher exits at once, whatever the job left in its process (issue 42: a
Ctrl-C left the launcher alive 3-15 s after ``teardown complete``; the interpreter's finalization joined the
threads a job left and garbage-collected the heap, on a busy machine for seconds, with a stuck thread forever).
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from launch_helpers import PYTHON, launch_until_job_runs, local_host, write_hosts_toml

pytestmark = pytest.mark.processes


def test_ctrl_c_ends_the_launcher_even_with_a_thread_the_job_left(tmp_path: Path) -> None:
    config = write_hosts_toml(tmp_path, [local_host("n0", tmp_path / "n0")],
                              [{"id": "c", "worker": {"kind": "serve", "actor_class": "launch_actors:Counter"}}],
                              job="launch_jobs:leave_a_thread")  # fmt: skip
    launcher = launch_until_job_runs([PYTHON, "-m", "launcher.console.cli", str(config)], tmp_path / "marker.json")
    try:
        launcher.send_signal(signal.SIGINT)
        _, err = launcher.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("the launcher did not exit after its teardown (it waited for the job's thread)") from None
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.communicate(timeout=10)
    assert launcher.returncode == 130, err.decode()[-2000:]
    assert b"teardown complete" in err
