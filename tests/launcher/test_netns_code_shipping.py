"""Code shipping over SSH (launcher/launch/code_shipping.py): a job and an actor class that exist only in the job's
working dir, with a py_modules package beside it, run on two netns SSH hosts. As Ray's ``runtime_env={"working_dir":
...}`` (ray/_private/runtime_env/packaging.py: a content-addressed zip, cached per node), the second launch of unchanged
code sends nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import toml_text
from launch_helpers import PYTHON, NetnsCluster, ssh_host, subprocess_env
from sshd_fixture import SshKeys

pytestmark = pytest.mark.processes

SHIPPED = """
import json
import os

import helperpkg
from runtime import spawn


class Greeter:
    def __init__(self, *, greeting: str) -> None:
        self.greeting = greeting
        self.children = []

    def where(self) -> dict:
        child = spawn("shippedmod:Child")  # an actor spawned by an actor imports the shipped code too
        self.children.append(child)
        return {"host": os.environ["MILES_HOST"], "module": __file__, "helper": helperpkg.__file__,
                "greeting": helperpkg.shout(self.greeting), "child": child.module_file().result(timeout=60)}


class Child:
    def module_file(self) -> str:
        return __file__


def main(ctx) -> int:
    actors = [handle.where().result(timeout=90) for handle in ctx.handles("greeters")]
    print("SHIPPED " + json.dumps({"job": __file__, "actors": actors}), flush=True)
    return 0
"""


def write(tmp_path: Path, cluster: NetnsCluster, keys: SshKeys) -> Path:
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "shippedmod.py").write_text(SHIPPED)
    (project / "data" / "huge.bin").write_bytes(b"\0" * 4096)  # .gitignore'd: never shipped
    (project / ".gitignore").write_text("data/\n")
    helper = tmp_path / "libs" / "helperpkg"
    helper.mkdir(parents=True)
    (helper / "__init__.py").write_text("def shout(text):\n    return text.upper() + '!'\n")
    hosts = [ssh_host(name, address, 22, keys, tmp_path / name) for name, _, address in cluster.hosts]
    data = {
        "launcher": {"workdir": str(tmp_path / "run"), "stop_grace_s": 2},
        "hosts": hosts,
        "job": {"entrypoint": "shippedmod:main", "py_modules": ["../libs/helperpkg"]},
        "pools": [
            {
                "id": "greeters",
                "cells": 2,
                "strategy": "SPREAD",
                "worker": {"kind": "serve", "actor_class": "shippedmod:Greeter", "kwargs": {"greeting": "hi"}},
            }
        ],
    }
    path = project / "hosts.toml"
    path.write_text(toml_text.dump(data))
    return path


def launch(cluster: NetnsCluster, config: Path) -> subprocess.CompletedProcess[str]:
    argv = [*cluster.exec_argv(), PYTHON, "-m", "launcher.console.cli", str(config)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, env=subprocess_env(), cwd="/")


def test_working_dir_and_py_modules_reach_both_hosts_once(
    netns_cluster: NetnsCluster, ssh_keys: SshKeys, tmp_path: Path
) -> None:
    config = write(tmp_path, netns_cluster, ssh_keys)
    first = launch(netns_cluster, config)
    assert first.returncode == 0, first.stderr[-4000:]
    out = json.loads(first.stdout.split("SHIPPED ", 1)[1].splitlines()[0])
    assert out["job"] == str(config.parent / "shippedmod.py")  # the launcher imports it in place
    assert sorted(a["host"] for a in out["actors"]) == ["h1", "h2"]
    for actor in out["actors"]:  # each host imports its own unpacked copy, from its workdir's code cache
        code = tmp_path / actor["host"] / "code"
        assert Path(actor["module"]).parent.parent == code, actor
        assert Path(actor["child"]) == Path(actor["module"])
        assert Path(actor["helper"]).parent.parent.parent == code and actor["greeting"] == "HI!"
        assert not (Path(actor["module"]).parent / "data").exists()
    for name in ("h1", "h2"):
        assert f"host {name}: code sent" in first.stderr
    second = launch(netns_cluster, config)
    assert second.returncode == 0, second.stderr[-4000:]
    for name in ("h1", "h2"):
        assert f"host {name}: code already there (same digest), nothing sent" in second.stderr
    assert netns_cluster.stray_pids() == {ns: set() for _, ns, _ in netns_cluster.hosts}
