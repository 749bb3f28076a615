"""``[cluster] provider = "slurm"``: hosts.toml's Slurm table, and the ``[[hosts]]`` it stands for."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from launcher.errors import ConfigError
from launcher.hosts.slurm_allocation import Allocation, current_allocation
from launcher.hosts.slurm_commands import SlurmError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

SLURM_PROVIDER = "slurm"


class SlurmCluster(BaseModel):
    """The ``[cluster]`` table for Slurm: what ``--submit`` asks for, and extra options of the agents' steps."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: Literal["slurm"]
    nodes: int = Field(default=1, gt=0, description="--submit: sbatch --nodes")
    gpus_per_node: int = Field(default=0, ge=0, description="--submit: sbatch --gres=gpu:N (0: no GPUs)")
    partition: str | None = Field(default=None, description="--submit: sbatch --partition")
    account: str | None = Field(default=None, description="--submit: sbatch --account")
    time: str = Field(default="01:00:00", min_length=1, description="--submit: sbatch --time (the job's limit)")
    job_name: str = Field(default="miles-launch", min_length=1, description="--submit: sbatch --job-name")
    sbatch_args: tuple[str, ...] = Field(default=(), description="--submit: more sbatch options, e.g. ['--qos=high']")
    srun_args: tuple[str, ...] = Field(default=(), description="more srun options for every host agent's step")
    python: str = Field(default=sys.executable, description="--submit: the Python that runs miles-launch in the job")


def read_cluster(path: Path) -> SlurmCluster | None:
    """The ``[cluster]`` table of a hosts.toml (None without one), read without resolving any host."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    return cluster_settings(raw.get("cluster"), str(path)) if "cluster" in raw else None


def cluster_settings(table: Any, label: str) -> SlurmCluster:
    """Validate ``[cluster]``; ConfigError naming the field."""
    if not isinstance(table, dict):
        raise ConfigError(f"{label}: [cluster] must be a table, got {type(table).__name__}")
    try:
        return SlurmCluster.model_validate(table)
    except ValidationError as exc:
        problems = "; ".join(
            f"field 'cluster.{'.'.join(map(str, e['loc']))}': {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise ConfigError(
            f"{label}: [cluster]: {problems} (the only provider set in [cluster] is 'slurm'; ssh and local hosts "
            "are listed as [[hosts]])"
        ) from None


def expand_cluster(raw: dict[str, Any], *, label: str, allocation: Allocation | None = None) -> dict[str, Any]:
    """hosts.toml's tables with ``[cluster]`` validated and its hosts added (the allocation's nodes: ``allocation``,
    else the one this process runs in); unchanged without ``[cluster]``.

    One ``provider = "slurm"`` host per node (launcher/hosts/slurm_allocation.py), named like the node, at its
    ``NodeAddr``, with its GPU ids; ``[host_defaults]`` (python, workdir, env) applies to each. ``--submit`` plans
    with the nodes it will ask for (``nodes`` x ``gpus_per_node``) before it submits, so a plan that does not fit
    fails on the login node."""
    if "cluster" not in raw:
        return raw
    cluster = cluster_settings(raw["cluster"], label)
    if raw.get("hosts"):
        raise ConfigError(
            f"{label}: [cluster] provider = 'slurm' takes the hosts from the Slurm allocation, but the file also lists "
            "[[hosts]]. Fix: remove the [[hosts]] entries (set python, workdir and env in [host_defaults])"
        )
    try:
        allocation = allocation if allocation is not None else current_allocation()
    except SlurmError as exc:
        raise ConfigError(f"{label}: {exc}") from None
    hosts = [
        {"name": node.name, "address": node.address, "provider": SLURM_PROVIDER, "gpus": list(node.gpu_ids)}
        for node in allocation.nodes
    ]
    return {**raw, "cluster": cluster.model_dump(), "hosts": hosts}
