"""The Slurm allocation miles-launch runs in: its nodes, their addresses and GPUs, read from Slurm itself."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from launcher.hosts.slurm_commands import SlurmError, run_tool

Runner = Callable[[Sequence[str]], str]
_GRES_RE = re.compile(r"^\s*Nodes=(\S+)\s.*?\bGRES=(\S*)", re.MULTILINE)
_GPU_RE = re.compile(r"gpu(?::[^:(,]+)?:(\d+)(?:\(IDX:([0-9,\-]+)\))?")
BAD_STATES = ("DOWN", "FAIL", "NOT_RESPONDING", "POWERED_DOWN", "POWER_DOWN", "UNKNOWN")


@dataclass(frozen=True)
class SlurmNode:
    """One node of the allocation."""

    name: str
    address: str
    gpu_ids: tuple[int, ...]


@dataclass(frozen=True)
class Allocation:
    """The allocation's job id (None: a plan for ``--submit``, before there is one) and its nodes, in order."""

    job_id: str | None
    nodes: tuple[SlurmNode, ...]


def _run(argv: Sequence[str]) -> str:
    return run_tool(argv)


def current_allocation(env: Mapping[str, str] | None = None, run: Runner = _run) -> Allocation:
    """The allocation this process runs in; SlurmError saying how to get one when there is none.

    Nodes come from ``SLURM_JOB_NODELIST`` expanded by ``scontrol show hostnames``; each node's address
    (``NodeAddr``) and state from ``scontrol show node`` (a node down, failing or not responding is refused, naming
    it and the fix); its GPUs from the job's per-node GRES (``scontrol show job -d``: ``GRES=gpu:2(IDX:0-1)``), else
    ``SLURM_GPUS_ON_NODE`` (ids 0..n-1), and their ids as a step sees them (:func:`step_gpus`), so the ids given to
    workers are the ones their step can use."""
    env = os.environ if env is None else env
    job_id, nodelist = env.get("SLURM_JOB_ID"), env.get("SLURM_JOB_NODELIST")
    if not job_id or not nodelist:
        raise SlurmError(
            "[cluster] provider = 'slurm' but this process is not in a Slurm allocation (SLURM_JOB_ID / "
            "SLURM_JOB_NODELIST are not set). Fix: run it inside one (`salloc -N2 --gres=gpu:8 miles-launch "
            "hosts.toml`, or from an sbatch script), or submit it from a login node with `miles-launch hosts.toml "
            "--submit`"
        )
    names = hostnames(nodelist, run)
    info = node_info(run(["scontrol", "show", "node", "-o", nodelist]))
    for name in names:
        if name not in info:
            raise SlurmError(f"node {name!r} of Slurm job {job_id}: `scontrol show node` does not list it")
        check_node_state(name, info[name], job_id)
    gpus = node_gpus(run(["scontrol", "show", "job", "-d", job_id]), run)
    fallback = env.get("SLURM_GPUS_ON_NODE", "").strip()
    default = tuple(range(int(fallback))) if fallback.isdigit() else ()
    if gpus or default:
        gpus = {**gpus, **step_gpus(job_id, names, run)}
    nodes = [SlurmNode(name, info[name].get("NodeAddr") or name, gpus.get(name, default)) for name in names]
    return Allocation(job_id, tuple(nodes))


def hostnames(nodelist: str, run: Runner) -> list[str]:
    """A Slurm hostlist (``node[1-3,7]``) expanded by ``scontrol show hostnames``."""
    return run(["scontrol", "show", "hostnames", nodelist]).split()


def node_gpus(job_detail: str, run: Runner) -> dict[str, tuple[int, ...]]:
    """Node -> GPU ids of the job on it, from ``scontrol show job -d`` (nodes without GPU GRES left out)."""
    found: dict[str, tuple[int, ...]] = {}
    for nodes, gres in _GRES_RE.findall(job_detail):
        ids: list[int] = []
        for count, index in _GPU_RE.findall(gres):
            ids += _index_list(index) if index else list(range(len(ids), len(ids) + int(count)))
        if ids:
            for name in hostnames(nodes, run):
                found[name] = tuple(sorted(set(ids)))
    return found


# One srun over the nodes prints CUDA_VISIBLE_DEVICES: Slurm numbers the GPUs from 0 where cgroups constrain
# devices, by the node's indices otherwise.
def step_gpus(job_id: str, names: Sequence[str], run: Runner) -> dict[str, tuple[int, ...]]:
    """Node -> the GPU ids a step of the job sees there (its ``CUDA_VISIBLE_DEVICES``, which Slurm numbers from 0
    where cgroups constrain the devices, else by the node's indices): the ids the node's workers are given."""
    probe = 'echo "MILES_GPUS $SLURMD_NODENAME ${CUDA_VISIBLE_DEVICES-none}"'
    out = run(["srun", "--overlap", f"--jobid={job_id}", f"--nodes={len(names)}", "--ntasks-per-node=1",
               f"--nodelist={','.join(names)}", "--job-name=miles-gpus", "--quiet", "bash", "-c", probe])  # fmt: skip
    found: dict[str, tuple[int, ...]] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "MILES_GPUS" and all(p.isdigit() for p in parts[2].split(",")):
            found[parts[1]] = tuple(int(p) for p in parts[2].split(","))
    return found


def _index_list(text: str) -> list[int]:
    ids: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        ids += list(range(int(low), int(high or low) + 1))
    return ids


def node_info(text: str) -> dict[str, dict[str, str]]:
    """``scontrol show node -o`` (one line per node, ``Key=Value`` fields) -> node -> fields."""
    nodes: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if "NodeName" in fields:
            nodes[fields["NodeName"]] = fields
    return nodes


def check_node_state(name: str, fields: Mapping[str, str], job_id: str | None) -> None:
    """SlurmError when a node of the allocation cannot run steps (down, failing, not responding)."""
    state = fields.get("State", "")
    bad = [flag for flag in re.split(r"[+*]", state) if flag in BAD_STATES] + (["NOT_RESPONDING"] * state.endswith("*"))
    if bad:
        reason = fields.get("Reason")
        raise SlurmError(
            f"node {name!r} of Slurm job {job_id} is {state}{f' (reason: {reason})' if reason else ''}: its host "
            "agent cannot start there. Fix: get a new allocation without it (`salloc --exclude={name} ...`), or ask "
            "the admins to resume it (`scontrol update nodename={name} state=resume`)".replace("{name}", name)
        )


def planned_allocation(nodes: int, gpus_per_node: int) -> Allocation:
    """What ``--submit`` will ask Slurm for, as an allocation to plan with (placeholder node names)."""
    return Allocation(
        None, tuple(SlurmNode(f"node{i}", f"node{i}", tuple(range(gpus_per_node))) for i in range(1, nodes + 1))
    )
