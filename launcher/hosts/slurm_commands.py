"""Slurm's client tools, run with a deadline: ``scontrol``, ``srun``, ``sbatch``, ``scancel``."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from launcher.errors import LauncherError

DEFAULT_TIMEOUT_S = 30.0


class SlurmError(LauncherError):
    """A Slurm client command failed (or is not installed)."""


def tool(name: str) -> str:
    """The path of a Slurm client tool; SlurmError when it is not on PATH."""
    path = shutil.which(name)
    if path is None:
        raise SlurmError(
            f"the Slurm client tool {name!r} is not on PATH: run miles-launch on a node of the Slurm cluster (a login "
            "node or inside an allocation), or install Slurm's client tools (Debian: slurm-client)"
        )
    return path


def run_tool(argv: Sequence[str], *, timeout_s: float = DEFAULT_TIMEOUT_S, stdin: str | None = None) -> str:
    """Run a Slurm tool (``argv[0]`` looked up on PATH) and return its stdout; SlurmError on failure (a missing tool,
    a non-zero exit, the timeout), naming the command and what Slurm said."""
    command = [tool(argv[0]), *argv[1:]]
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{' '.join(argv)}` did not finish within {timeout_s:g}s: is slurmctld reachable?") from None
    except OSError as exc:
        raise SlurmError(f"cannot run `{' '.join(argv)}`: {exc.strerror or exc}") from None
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip())[-500:]
        raise SlurmError(f"`{' '.join(argv)}` failed (exit {done.returncode}): {said}")
    return done.stdout


def step_argv(node: str, *, job_id: str | None = None, name: str = "miles", extra: Sequence[str] = ()) -> list[str]:
    """``srun`` options of a one-task step on ``node`` that shares the allocation with every other step
    (``--overlap``) and ends when its task fails (``--kill-on-bad-exit``); the command follows. The one place such
    a step is spelled (host agents, ``miles-launch down``'s leftover check, key removal)."""
    argv = [tool("srun"), "--overlap", "--kill-on-bad-exit=1", f"--nodelist={node}", "-N1", "-n1"]
    if job_id:
        argv.append(f"--jobid={job_id}")
    return [*argv, f"--job-name={name}", "--quiet", *extra]
