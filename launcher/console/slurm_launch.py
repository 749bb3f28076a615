"""The CLI's Slurm paths: plan on a login node, ``--submit`` (sbatch, stream the console, Ctrl-C cancels), ``down``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher.config.hosts_config import ClusterConfig
from launcher.config.placement import PlacementPlan, plan_placement
from launcher.config.slurm_config import SlurmCluster, read_cluster
from launcher.errors import ConfigError, PlacementError
from launcher.hosts.slurm_allocation import Allocation, planned_allocation
from launcher.hosts.slurm_commands import SlurmError, run_tool
from launcher.launch.launch_state import state_path_for

JOB_FILE = "slurm-job.json"
SCRIPT_FILE = "slurm-submit.sh"
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE", "SPECIAL_EXIT", "REVOKED")  # fmt: skip
GONE = "GONE"  # slurmctld forgot the job (MinJobAge passed)
CANCEL_WAIT_S = 120.0
Write = Callable[[str], None]


def login_allocation(path: str, *, submit: bool, command: str) -> Allocation | None:
    """The allocation to plan a ``[cluster]`` file with outside Slurm (``--submit``; ``down``, ``status`` from a
    login node):
    the nodes it asks for. None: plan with the allocation this process runs in (or the file has no [cluster])."""
    in_allocation = bool(os.environ.get("SLURM_JOB_ID"))
    if not submit and (command not in ("down", "status") or in_allocation):
        return None
    cluster = read_cluster(Path(path))
    if cluster is None:
        if submit:
            raise ConfigError(f"{path}: --submit needs a [cluster] table with provider = 'slurm' (sbatch settings)")
        return None
    return planned_allocation(cluster.nodes, cluster.gpus_per_node)


def plan(config: ClusterConfig) -> PlacementPlan:
    """The placement plan; on a Slurm allocation a plan that does not fit says how to ask for more."""
    try:
        return plan_placement(config.hosts, config.pools)
    except PlacementError as exc:
        if config.cluster is None:
            raise
        gpus = sum(len(h.gpu_ids) for h in config.hosts if h.provider == "slurm")
        nodes = sum(1 for h in config.hosts if h.provider == "slurm")
        raise PlacementError(
            f"{exc}\nThe Slurm allocation has {nodes} node(s) with {gpus} GPU(s) in all. Fix: ask Slurm for more "
            "(`salloc -N<nodes> --gres=gpu:<per node>`; with --submit: [cluster] nodes / gpus_per_node), or shrink "
            "the pools"
        ) from None


def batch_script(config: ClusterConfig, cluster: SlurmCluster, launcher_args: list[str]) -> str:
    """The sbatch script of a ``--submit``: ``#SBATCH`` lines from [cluster], then miles-launch in the job."""
    workdir = Path(config.launcher.workdir)
    options = [f"--job-name={cluster.job_name}", f"--nodes={cluster.nodes}", "--ntasks-per-node=1",
               f"--time={cluster.time}", f"--output={workdir / 'slurm-%j.out'}"]  # fmt: skip
    if cluster.gpus_per_node:
        options.append(f"--gres=gpu:{cluster.gpus_per_node}")
    options += [f"--partition={cluster.partition}"] * bool(cluster.partition)
    options += [f"--account={cluster.account}"] * bool(cluster.account)
    options += list(cluster.sbatch_args)
    source = Path(config.source or "hosts.toml").resolve()
    run = [cluster.python, "-m", "launcher.console.cli", "run", str(source), *launcher_args]
    return "\n".join([
        "#!/bin/bash",
        f"# written by `miles-launch {source} --submit`; the job runs the launch inside its allocation",
        *(f"#SBATCH {option}" for option in options),
        f"cd {shlex.quote(str(Path.cwd()))}",
        f"exec {shlex.join(run)}",
        "",
    ])  # fmt: skip


def submit(config: ClusterConfig, cluster: SlurmCluster, launcher_args: list[str]) -> tuple[str, Path]:
    """Write and sbatch the script; (job id, its output file). The job is recorded for ``down``.

    ``--submit`` plans first with the nodes ``[cluster]`` asks for (a plan that does not fit fails before anything
    is queued), then writes ``{launcher.workdir}/slurm-submit.sh`` (nodes, gres, time, partition, account, job name,
    extra sbatch options; it runs ``miles-launch hosts.toml`` inside the allocation), submits it with ``sbatch
    --parsable`` and records the job in ``{launcher.workdir}/slurm-job.json``. The CLI then prints the job's output
    file (``slurm-<job id>.out`` in the workdir, which must be on a filesystem the login node shares with the
    nodes) as it grows and exits with the job's exit code."""
    workdir = Path(config.launcher.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / SCRIPT_FILE
    script.write_text(batch_script(config, cluster, launcher_args))
    job_id = run_tool(["sbatch", "--parsable", str(script)]).strip().split(";")[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch answered {job_id!r}, not a job id")
    output = workdir / f"slurm-{job_id}.out"
    (workdir / JOB_FILE).write_text(json.dumps({"job_id": job_id, "output": str(output), "script": str(script)}))
    return job_id, output


def submit_and_follow(
    config: ClusterConfig, cluster: SlurmCluster, launcher_args: list[str], *, write: Write, say: Write
) -> int:
    """``--submit``: submit, print the job's console (``write``) and its state changes (``say``) until it ended;
    its exit code (130 when interrupted: the job was cancelled). The job's record is removed once it ended."""
    job_id, output = submit(config, cluster, launcher_args)
    say(f"submitted Slurm job {job_id} ({cluster.nodes} node(s)); its console: {output}")
    try:
        return follow(job_id, JobConsole(output, write), say)
    finally:
        with contextlib.suppress(OSError, ValueError, KeyError):
            record = Path(config.launcher.workdir) / JOB_FILE
            if json.loads(record.read_text())["job_id"] == job_id:
                record.unlink()


def job_state(job_id: str) -> tuple[str, int | None]:
    """(Slurm state of the job, its exit code once ended); GONE once slurmctld no longer knows it."""
    try:
        out = run_tool(["scontrol", "show", "job", "-o", job_id])
    except SlurmError as exc:
        if "Invalid job id" in str(exc):
            return GONE, None
        raise
    fields = dict(part.split("=", 1) for part in out.split() if "=" in part)
    state = fields.get("JobState", "UNKNOWN")
    code, _, signal = fields.get("ExitCode", "").partition(":")
    exit_code = int(code) if code.isdigit() else None
    if exit_code == 0 and signal.isdigit() and int(signal):
        exit_code = 128 + int(signal)
    return state, exit_code if state in ENDED else None


class JobConsole:
    """Prints a job's output file as it grows."""

    def __init__(self, path: Path, write: Write) -> None:
        self.path, self.write, self.offset = path, write, 0

    def pump(self) -> None:
        """Print what was added since the last call."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        if data:
            self.write(data.decode(errors="replace"))


def follow(job_id: str, console: JobConsole, say: Write, *, poll_s: float = 0.5) -> int:
    """Print the job's console until it ends; its exit code. Ctrl-C (or SIGTERM, raised as KeyboardInterrupt)
    cancels the job and waits until it ended (130)."""
    last = None
    try:
        while True:
            console.pump()
            state, code = job_state(job_id)
            if state != last:
                say(f"Slurm job {job_id}: {state}")
                last = state
            if state in ENDED or state == GONE:
                console.pump()
                return code if code is not None else (0 if state == "COMPLETED" else 1)
            time.sleep(poll_s)
    except KeyboardInterrupt:
        say(f"interrupted: cancelling Slurm job {job_id} (scancel)")
        for message in cancel(job_id, console=console):
            say(message)
        return 130


def cancel(job_id: str, *, console: JobConsole | None = None, timeout_s: float = CANCEL_WAIT_S) -> list[str]:
    """scancel the job and wait (bounded) until Slurm says it ended; what happened, as messages.

    On Ctrl-C / SIGTERM of ``--submit`` or ``miles-launch down`` from another shell: Slurm signals every step (the
    launcher tears down, the agents kill their trees) and kills what is left."""
    state, _ = job_state(job_id)
    if state in ENDED or state == GONE:
        return [f"Slurm job {job_id} already ended ({state})"]
    run_tool(["scancel", job_id])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if console is not None:
            console.pump()
        state, _ = job_state(job_id)
        if (state in ENDED or state == GONE) and not _completing(job_id):
            return [f"Slurm job {job_id} cancelled ({state}); Slurm stopped every step on every node"]
        time.sleep(0.3)
    return [f"Slurm job {job_id} is still {state} {timeout_s:g}s after scancel: check `squeue -j {job_id}`"]


def _completing(job_id: str) -> bool:
    """True while squeue still lists the job (its nodes are still stopping its processes: COMPLETING)."""
    try:
        return bool(run_tool(["squeue", "-h", "-j", job_id, "-o", "%T"]).strip())
    except SlurmError:  # "Invalid job id": long gone
        return False


def down_submitted(config: ClusterConfig) -> list[str]:
    """``miles-launch down`` from a login node: cancel the submitted job (its launcher and agents go with it)."""
    workdir = Path(config.launcher.workdir)
    record = workdir / JOB_FILE
    try:
        job_id = str(json.loads(record.read_text())["job_id"])
    except (OSError, ValueError, KeyError):
        return [f"no submitted Slurm job recorded at {record}: nothing to cancel"]
    messages = cancel(job_id)
    record.unlink(missing_ok=True)
    state_path_for(config).unlink(missing_ok=True)  # the job's launcher is gone with the job
    return messages


def submitted_status(config: ClusterConfig) -> dict[str, Any]:
    """``miles-launch status`` from a login node: the submitted job's Slurm state (``running`` while it is queued or
    runs)."""
    record = Path(config.launcher.workdir) / JOB_FILE
    try:
        job = json.loads(record.read_text())
        job_id = str(job["job_id"])
    except (OSError, ValueError, KeyError):
        return {"running": False, "slurm_job": None, "message": f"no submitted Slurm job recorded at {record}"}
    state, code = job_state(job_id)
    running = state not in ENDED and state != GONE
    ended = f", exit code {code}" if code is not None else ""
    return {"running": running, "slurm_job": job_id, "state": state, "exit_code": code, "output": job.get("output"),
            "message": f"Slurm job {job_id}: {state}{ended}; its console: {job.get('output')}"}  # fmt: skip
