"""Code shipping inside a Slurm allocation (tests/launcher/slurm_fixture.py: a real two-node Slurm): the job's
working dir goes to each node through its host agent's ``srun`` step; the nodes share their workdir here, as
clusters often do, so they share one unpacked copy of each digest. Serve workers and command workers import it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import toml_text
from launch_helpers import PYTHON
from slurm_fixture import NODES, SlurmTestCluster
from test_slurm_cluster import NODE_ENV, launch_argv

pytestmark = pytest.mark.processes

MODULE = """
import json
import os


class Where:
    def where(self) -> dict:
        return {"host": os.environ["MILES_HOST"], "module": __file__}


def main(ctx) -> int:
    print("SHIPPED " + json.dumps([h.where().result(timeout=60) for h in ctx.handles("w")]), flush=True)
    return 0
"""
COMMAND = "{python} -c 'import slurmshipped, time; print(\"CMD\", slurmshipped.__file__, flush=True); time.sleep(600)'"


def test_code_reaches_every_node_through_the_allocation(slurm_cluster: SlurmTestCluster, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "slurmshipped.py").write_text(MODULE)
    data = {
        "cluster": {"provider": "slurm", "nodes": 2, "gpus_per_node": 2, "time": "00:05:00", "python": PYTHON},
        "launcher": {"workdir": str(tmp_path / "run"), "stop_grace_s": 2},
        "host_defaults": {"python": PYTHON, "workdir": str(tmp_path / "nodes"), "env": NODE_ENV},
        "job": {"entrypoint": "slurmshipped:main"},
        "pools": [
            {"id": "w", "cells": 2, "strategy": "SPREAD",
             "worker": {"kind": "serve", "actor_class": "slurmshipped:Where"}},
            {"id": "cmd", "cells": 2, "strategy": "SPREAD",
             "worker": {"kind": "command", "command": COMMAND, "ports": {}, "ready": {"kind": "none"}}},
        ],
    }  # fmt: skip
    config = project / "hosts.toml"
    config.write_text(toml_text.dump(data))
    salloc = [*slurm_cluster.exec_argv(), "salloc", "-N2", "--gres=gpu:2", "--time=5"]
    twice = f"{' '.join(launch_argv(config))} && echo SECOND && {' '.join(launch_argv(config))}"
    result = subprocess.run([*salloc, "bash", "-c", twice], capture_output=True, text=True, timeout=240,
                            env=slurm_cluster.env(), cwd="/")  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    first, second = out.split("\nSECOND\n", 1)
    code = tmp_path / "nodes" / "code"
    (digest,) = list(code.iterdir())  # one unpacked copy on the shared workdir, whichever node put it there
    actors = json.loads(first.split("SHIPPED ", 1)[1].splitlines()[0])
    assert sorted(a["host"] for a in actors) == list(NODES)
    assert {a["module"] for a in actors} == {str(digest / "slurmshipped.py")}
    assert first.count(f"CMD {digest / 'slurmshipped.py'}") == 2  # a command worker on each node imports it too
    for node in NODES:
        assert f"host {node}: code already there (same digest), nothing sent" in second
    slurm_cluster.assert_no_strays()
