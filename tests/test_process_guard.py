"""The ``processes`` marker's check (tests/process_guard.py), run on a small test file in a pytest of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

TESTS = Path(__file__).resolve().parent
SAMPLE = '''
import subprocess

import pytest


def test_pure():
    assert sum([1, 2]) == 3


def test_unmarked_start():
    subprocess.run(["true"], check=True)


@pytest.mark.processes
def test_marked_start():
    subprocess.run(["true"], check=True)
'''


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    processes: starts processes\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "process_guard", "-q", "-p", "no:cacheprovider",
                           "test_sample.py", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def test_an_unmarked_test_that_starts_a_process_fails_with_the_fix_where_no_marked_test_runs(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "-m", "not processes")
    assert "1 failed, 1 passed, 1 deselected" in done.stdout, done.stdout[-3000:]
    assert "test_sample.py::test_unmarked_start starts a process (subprocess.Popen ('true'" in done.stdout
    assert "mark its module `pytestmark = pytest.mark.processes`" in done.stdout


def test_nothing_is_checked_in_a_run_with_marked_tests(tmp_path: Path) -> None:
    done = _pytest(tmp_path)  # a marked test's processes may outlive it: the check would blame the next test
    assert "3 passed" in done.stdout, done.stdout[-3000:]
