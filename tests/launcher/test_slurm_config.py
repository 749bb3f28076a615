"""Slurm without a cluster: the allocation read from scontrol's answers, [cluster] in hosts.toml, the plan's hint
when pools do not fit, the sbatch script of --submit, and the errors naming the field and the fix.

scontrol's formats are Slurm 22.05's (``scontrol show job -d``: ``Nodes=... GRES=gpu:2(IDX:0-1)``; ``scontrol show
node -o``: one ``Key=Value`` line per node), as the real cluster of test_slurm_cluster.py prints them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import toml_text
from launch_helpers import PYTHON

from launcher.config.hosts_config import load_config
from launcher.console.cli import main
from launcher.console.slurm_launch import batch_script, plan
from launcher.errors import ConfigError, PlacementError
from launcher.hosts.slurm_allocation import Allocation, SlurmNode, current_allocation, node_gpus, planned_allocation
from launcher.hosts.slurm_commands import SlurmError

JOB = """JobId=7 JobName=interactive
   NumNodes=3 NumCPUs=3 NumTasks=3 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
     Nodes=gpu-[01-02] CPU_IDs=0 Mem=0 GRES=gpu:a100:4(IDX:0,2-4)
     Nodes=cpu-01 CPU_IDs=0 Mem=0 GRES=
"""
NODES = {
    "gpu-01": "NodeName=gpu-01 Arch=x86_64 NodeAddr=10.1.0.1 NodeHostName=gpu-01 State=ALLOCATED",
    "gpu-02": "NodeName=gpu-02 Arch=x86_64 NodeAddr=10.1.0.2 NodeHostName=gpu-02 State=MIXED+DRAIN",
    "cpu-01": "NodeName=cpu-01 Arch=x86_64 NodeAddr=10.1.0.9 NodeHostName=cpu-01 State=ALLOCATED",
}
HOSTLISTS = {"gpu-[01-02],cpu-01": "gpu-01\ngpu-02\ncpu-01\n", "gpu-[01-02]": "gpu-01\ngpu-02\n", "cpu-01": "cpu-01\n"}
ENV = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu-[01-02],cpu-01"}


def scontrol(nodes: dict[str, str] = NODES) -> object:
    def run(argv: Sequence[str]) -> str:
        assert argv[0] == "scontrol", argv
        if argv[1:3] == ["show", "hostnames"]:
            return HOSTLISTS[argv[3]]
        if argv[1:3] == ["show", "job"]:
            return JOB
        if argv[1:3] == ["show", "node"]:
            return "\n".join(nodes.values()) + "\n"
        raise AssertionError(argv)

    return run


def with_steps(visible: dict[str, str]) -> object:
    """scontrol as above, and an srun probe whose steps see ``visible`` (node -> CUDA_VISIBLE_DEVICES)."""
    calls = scontrol()

    def run(argv: Sequence[str]) -> str:
        if argv[0] == "srun":
            assert "--overlap" in argv and "--jobid=7" in argv and "--nodelist=gpu-01,gpu-02,cpu-01" in argv, argv
            return "".join(f"MILES_GPUS {node} {ids}\n" for node, ids in visible.items())
        return calls(argv)

    return run


def test_allocation_nodes_addresses_and_gpu_ids_from_scontrol_and_a_step() -> None:
    # gpu-01: no cgroup, a step sees the node's indices; gpu-02: ConstrainDevices, Slurm numbers them from 0
    steps = with_steps({"gpu-01": "0,2,3,4", "gpu-02": "0,1,2,3", "cpu-01": "none"})
    allocation = current_allocation(ENV, steps)
    assert allocation == Allocation(
        "7",
        (
            SlurmNode("gpu-01", "10.1.0.1", (0, 2, 3, 4)),
            SlurmNode("gpu-02", "10.1.0.2", (0, 1, 2, 3)),  # DRAIN still runs the job's steps
            SlurmNode("cpu-01", "10.1.0.9", ()),
        ),
    )
    gres = node_gpus(JOB, scontrol())  # typed gres with explicit indices; a node without GPUs is left out
    assert gres == {"gpu-01": (0, 2, 3, 4), "gpu-02": (0, 2, 3, 4)}
    assert node_gpus("     Nodes=cpu-01 CPU_IDs=0 Mem=0 GRES=gpu:2", scontrol()) == {"cpu-01": (0, 1)}  # no IDX
    fallback = current_allocation({**ENV, "SLURM_GPUS_ON_NODE": "2"}, steps)
    assert fallback.nodes[2].gpu_ids == (0, 1)  # no GRES there and no ids from the step: SLURM_GPUS_ON_NODE


def test_no_allocation_says_how_to_get_one() -> None:
    with pytest.raises(SlurmError) as err:
        current_allocation({}, scontrol())
    message = str(err.value)
    assert "not in a Slurm allocation" in message and "salloc -N2 --gres=gpu:8" in message and "--submit" in message


@pytest.mark.parametrize("state", ["DOWN+DRAIN", "IDLE+NOT_RESPONDING", "ALLOCATED*", "MIXED+FAIL"])
def test_a_node_down_is_refused_naming_it_and_the_fix(state: str) -> None:
    nodes = {**NODES, "gpu-02": NODES["gpu-02"].replace("State=MIXED+DRAIN", f"State={state} Reason=ECC")}
    with pytest.raises(SlurmError) as err:
        current_allocation(ENV, scontrol(nodes))
    message = str(err.value)
    assert f"node 'gpu-02' of Slurm job 7 is {state} (reason: ECC)" in message
    assert "salloc --exclude=gpu-02" in message and "scontrol update nodename=gpu-02 state=resume" in message


def slurm_toml(tmp_path: Path, gpus: float = 1, **cluster: object) -> Path:
    data = {
        "cluster": {"provider": "slurm", "nodes": 2, "gpus_per_node": 2, **cluster},
        "launcher": {"workdir": str(tmp_path / "run")},
        "host_defaults": {"python": PYTHON, "workdir": "/scratch/miles", "env": {"A": "1"}},
        "job": {"entrypoint": "launch_jobs:exit_code"},
        "pools": [{"id": "c", "cells": 2, "workers_per_cell": 2,
                   "worker": {"kind": "serve", "actor_class": "launch_actors:Counter", "gpus": gpus}}],
    }  # fmt: skip
    path = tmp_path / "hosts.toml"
    path.write_text(toml_text.dump(data))
    return path


def test_cluster_hosts_are_the_allocation_with_host_defaults(tmp_path: Path) -> None:
    allocation = current_allocation(ENV, with_steps({"gpu-01": "0,2,3,4", "gpu-02": "0,2,3,4"}))
    config = load_config(slurm_toml(tmp_path), allocation=allocation)
    assert [(h.name, h.address, h.provider, h.gpu_ids) for h in config.hosts] == [
        ("gpu-01", "10.1.0.1", "slurm", (0, 2, 3, 4)),
        ("gpu-02", "10.1.0.2", "slurm", (0, 2, 3, 4)),
        ("cpu-01", "10.1.0.9", "slurm", ()),
    ]
    assert {(str(h.workdir), h.python, h.env["A"], h.actor_bind_host) for h in config.hosts} == {
        ("/scratch/miles", PYTHON, "1", "0.0.0.0")
    }
    assert config.cluster is not None and config.cluster.nodes == 2
    placed = [(w.host, w.gpu_ids, w.local_rank) for w in plan(config).workers()]
    assert placed == [("gpu-01", (0,), 0), ("gpu-01", (2,), 1), ("gpu-01", (3,), 0), ("gpu-01", (4,), 1)]


def test_cluster_table_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"field 'cluster.nodes': Input should be greater than 0"):
        load_config(slurm_toml(tmp_path, nodes=0), allocation=planned_allocation(1, 1))
    with pytest.raises(ConfigError, match=r"field 'cluster.provider': Input should be 'slurm'"):
        load_config(slurm_toml(tmp_path, provider="ssh"), allocation=planned_allocation(1, 1))
    path = slurm_toml(tmp_path)
    path.write_text(path.read_text() + '\n[[hosts]]\nname = "a"\naddress = "10.0.0.1"\nworkdir = "/w"\n')
    with pytest.raises(ConfigError, match=r"takes the hosts from the Slurm allocation.*remove the \[\[hosts\]\]"):
        load_config(path, allocation=planned_allocation(1, 1))
    relative = slurm_toml(tmp_path)
    relative.write_text(relative.read_text().replace('workdir = "/scratch/miles"', 'workdir = "nodes"'))
    with pytest.raises(ConfigError, match=r"workdir of a slurm host \(a node of the allocation\) must be an absolute"):
        load_config(relative, allocation=planned_allocation(1, 1))


def test_too_few_gpus_names_the_allocation_and_the_fix(tmp_path: Path) -> None:
    config = load_config(slurm_toml(tmp_path, gpus=2), allocation=planned_allocation(2, 2))
    with pytest.raises(PlacementError) as err:
        plan(config)
    message = str(err.value)
    assert "no host can take 2 GPU(s)" in message
    assert "The Slurm allocation has 2 node(s) with 4 GPU(s) in all" in message
    assert "[cluster] nodes / gpus_per_node" in message


def test_sbatch_script_from_the_cluster_table(tmp_path: Path) -> None:
    path = slurm_toml(tmp_path, partition="gpu", account="proj", time="00:30:00", sbatch_args=["--qos=high"],
                      python="/opt/venv/bin/python", job_name="grpo")  # fmt: skip
    config = load_config(path, allocation=planned_allocation(2, 2))
    assert config.cluster is not None
    lines = batch_script(config, config.cluster, ["--no-curve"]).splitlines()
    assert lines[0] == "#!/bin/bash"
    assert [line for line in lines if line.startswith("#SBATCH")] == [
        "#SBATCH --job-name=grpo", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --time=00:30:00",
        f"#SBATCH --output={tmp_path / 'run' / 'slurm-%j.out'}", "#SBATCH --gres=gpu:2", "#SBATCH --partition=gpu",
        "#SBATCH --account=proj", "#SBATCH --qos=high",
    ]  # fmt: skip
    assert lines[-1] == f"exec /opt/venv/bin/python -m launcher.console.cli run {path} --no-curve"


def test_cli_outside_an_allocation_and_submit_without_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    assert main([str(slurm_toml(tmp_path)), "--dry-run"]) == 2
    assert "not in a Slurm allocation" in capsys.readouterr().err
    assert main([str(slurm_toml(tmp_path)), "--submit", "--dry-run"]) == 0  # plans with the nodes it will ask for
    planned = capsys.readouterr().out
    assert "#SBATCH --nodes=2" in planned and "(hosts node1..node2: the nodes Slurm will give the job)" in planned
    assert main(["down", str(slurm_toml(tmp_path))]) == 0  # nothing submitted: nothing to cancel
    assert "no submitted Slurm job recorded" in capsys.readouterr().err
    assert main(["status", str(slurm_toml(tmp_path))]) == 3
    assert "no submitted Slurm job recorded" in capsys.readouterr().out
    plain = tmp_path / "plain.toml"
    plain.write_text(slurm_toml(tmp_path).read_text().split("[launcher]")[1].join(["[launcher]", ""]))
    assert main([str(plain), "--submit"]) == 2
    assert "--submit needs a [cluster] table with provider = 'slurm'" in capsys.readouterr().err
