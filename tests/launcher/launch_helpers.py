"""Helpers shared by launcher tests: paths, subprocess env, hosts.toml entries, the netns cluster model."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sshd_fixture import Sshd, SshKeys

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
NETNS_SH = HERE / "netns.sh"
NETNS_OCTET = "77"


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for launcher/agent subprocesses: test helpers importable (launch_jobs, launch_workers)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def local_host(name: str, workdir: Path, **fields: Any) -> dict[str, Any]:
    """A [[hosts]] entry for the local provider."""
    return {
        "name": name,
        "address": "localhost",
        "provider": "local",
        "python": PYTHON,
        "workdir": str(workdir),
        "env": {"PYTHONPATH": str(HERE)},
        **fields,
    }


def ssh_host(name: str, address: str, port: int, keys: SshKeys, workdir: Path, **fields: Any) -> dict[str, Any]:
    """A [[hosts]] entry reached over SSH with the test client key."""
    return {
        "name": name,
        "address": address,
        "provider": "ssh",
        "python": PYTHON,
        "workdir": str(workdir),
        "env": {"PYTHONPATH": str(HERE)},
        "ssh": {
            "user": "root" if os.geteuid() == 0 else os.environ.get("USER", "root"),
            "port": port,
            "key_file": str(keys.client_key),
        },
        **fields,
    }


@dataclass
class NetnsCluster:
    """Two hosts in their own network namespaces on a bridge; the launcher runs in the switch namespace."""

    tag: str
    switch: str
    hosts: list[tuple[str, str, str]]  # (name, namespace, address)
    sshds: list[Sshd] = field(default_factory=list)

    def exec_argv(self, namespace: str | None = None) -> list[str]:
        """Prefix to run a command inside a namespace (the switch namespace by default)."""
        return ["ip", "netns", "exec", namespace or self.switch]

    def pids(self, namespace: str) -> set[int]:
        """Every pid inside a namespace."""
        out = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, check=True)
        return {int(x) for x in out.stdout.split()}

    def stray_pids(self) -> dict[str, set[int]]:
        """Pids in each host namespace other than its sshd listener."""
        listeners = {s.pid for s in self.sshds}
        return {ns: self.pids(ns) - listeners for _, ns, _ in self.hosts}
