"""A throwaway SSH cluster on this machine for benchmarks: N hosts in network namespaces, each with its own sshd.

Namespaces ``TAG-c`` (a bridge at 10.200.OCTET.1, where the launcher runs) and ``TAG-h1..N`` (10.200.OCTET.10+i),
made with tests/launcher/netns.sh and the tests' sshd fixture (real OpenSSH, generated keys). Needs root,
iproute2 and openssh-server. Everything started here is stopped by pid and the namespaces are removed on exit.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests" / "launcher"
NETNS_SH = TESTS / "netns.sh"
OCTET = "78"  # tests use 77: a bench may run beside them


@dataclass(frozen=True)
class NamespaceHost:
    """One SSH host of the cluster."""

    name: str
    namespace: str
    address: str


@dataclass(frozen=True)
class NamespaceCluster:
    """The running cluster: where to run the launcher and how to reach each host."""

    switch: str
    hosts: list[NamespaceHost]
    client_key: Path
    workdir: Path

    def exec_argv(self) -> list[str]:
        """Prefix that runs a command in the launcher's namespace."""
        return ["ip", "netns", "exec", self.switch]

    def hosts_toml(self, *, python: str, pythonpath: str) -> str:
        """``[[hosts]]`` entries for every host (root over SSH with the generated key)."""
        entries = []
        for host in self.hosts:
            entries.append(
                f'[[hosts]]\nname = "{host.name}"\naddress = "{host.address}"\npython = "{python}"\n'
                f'workdir = "{self.workdir / host.name}"\nenv = {{ PYTHONPATH = "{pythonpath}" }}\n'
                f'ssh = {{ user = "root", port = 22, key_file = "{self.client_key}", '
                'host_key_policy = "accept-new" }\n'
            )
        return "\n".join(entries)


@contextlib.contextmanager
def namespace_cluster(count: int) -> Iterator[NamespaceCluster]:
    """Bring up ``count`` SSH hosts in namespaces; tear everything down afterwards, whatever happens."""
    if os.geteuid() != 0:
        raise SystemExit("a namespace cluster needs root (ip netns, sshd)")
    sys.path.insert(0, str(TESTS))
    from sshd_fixture import Sshd, generate_keys, sshd_available

    problem = sshd_available()
    if problem:
        raise SystemExit(f"cannot start sshd: {problem}")
    tag = f"mlb{os.getpid()}"
    hosts = [NamespaceHost(f"h{i}", f"{tag}-h{i}", f"10.200.{OCTET}.{10 + i}") for i in range(1, count + 1)]
    sshds: list[Sshd] = []
    with tempfile.TemporaryDirectory(prefix="netns-bench-") as tmp:
        subprocess.run([str(NETNS_SH), "down", tag], check=False)
        subprocess.run([str(NETNS_SH), "up", tag, OCTET, str(count)], check=True)
        try:
            keys = generate_keys(Path(tmp) / "keys")
            for host in hosts:
                sshd = Sshd(Path(tmp) / f"sshd-{host.name}", keys, host.address, 22, netns=host.namespace)
                sshds.append(sshd.start())
            yield NamespaceCluster(f"{tag}-c", hosts, keys.client_key, Path(tmp) / "hosts")
        finally:
            for sshd in sshds:
                sshd.stop()
            for host in hosts:  # anything left in our namespaces is ours
                _kill_namespace_processes(host.namespace)
            subprocess.run([str(NETNS_SH), "down", tag], check=False)


def _kill_namespace_processes(namespace: str) -> None:
    result = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False)
    for pid in (int(p) for p in result.stdout.split()):
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
