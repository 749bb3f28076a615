"""Fixtures for launcher tests: real sshd on loopback, a two-host cluster in network namespaces, leak checks."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator

import psutil
import pytest
from launch_helpers import NETNS_OCTET, NETNS_SH, NetnsCluster
from slurm_fixture import SlurmTestCluster, slurm_available
from sshd_fixture import LISTENER_PIDS, Sshd, SshKeys, generate_keys, sshd_available

from actors.processes import free_port


@pytest.fixture(scope="session")
def ssh_keys(tmp_path_factory: pytest.TempPathFactory) -> SshKeys:
    """Generated host and client keys (fails without root/openssh)."""
    reason = sshd_available()
    if reason:
        pytest.fail(f"real sshd {reason} (scripts/setup.sh installs openssh-server; the tests need root)")
    return generate_keys(tmp_path_factory.mktemp("ssh-keys"))


@pytest.fixture(scope="session")
def loopback_sshd(ssh_keys: SshKeys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """A real sshd on 127.0.0.1:<free port>."""
    sshd = Sshd(tmp_path_factory.mktemp("sshd-loopback"), ssh_keys, "127.0.0.1", free_port()).start()
    try:
        yield sshd
    finally:
        sshd.stop()


@pytest.fixture(scope="module")
def netns_cluster(ssh_keys: SshKeys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsCluster]:
    """Namespaces TAG-c (bridge 10.200.77.1) + TAG-h1/h2 (10.200.77.11/12), each host with its own sshd:22."""
    tag = f"mlt{os.getpid()}"
    subprocess.run([str(NETNS_SH), "down", tag], check=False)
    subprocess.run([str(NETNS_SH), "up", tag, NETNS_OCTET, "2"], check=True)
    cluster = NetnsCluster(
        tag=tag,
        switch=f"{tag}-c",
        hosts=[(f"h{i}", f"{tag}-h{i}", f"10.200.{NETNS_OCTET}.{10 + i}") for i in (1, 2)],
    )
    try:
        for name, namespace, address in cluster.hosts:
            workdir = tmp_path_factory.mktemp(f"sshd-{name}")
            cluster.sshds.append(Sshd(workdir, ssh_keys, address, 22, netns=namespace).start())
        yield cluster
    finally:
        for sshd in cluster.sshds:
            sshd.stop()
        for _, namespace, _ in cluster.hosts:  # anything left in our namespaces is ours: kill by pid
            with contextlib.suppress(subprocess.CalledProcessError):
                for pid in cluster.pids(namespace):
                    with contextlib.suppress(psutil.Error):
                        psutil.Process(pid).kill()
        subprocess.run([str(NETNS_SH), "down", tag], check=False)


def _descendants() -> dict[int, str]:
    out = {}
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                out[proc.pid] = " ".join(proc.cmdline())[:120]
    return out


@pytest.fixture(autouse=True)
def no_leftover_processes() -> Iterator[None]:
    """Every test must leave no process behind (fixture sshd listeners excepted); leftovers are killed."""
    before = set(_descendants())
    yield
    deadline = time.monotonic() + 10.0
    while True:
        left = {p: c for p, c in _descendants().items() if p not in before and p not in LISTENER_PIDS}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    assert not left, f"processes left behind: {left}"


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmTestCluster]:
    """A real two-node Slurm (munged, slurmctld, slurmd node1/node2 in their own network namespaces)."""
    reason = slurm_available()
    if reason:
        pytest.fail(f"real Slurm {reason}")
    cluster = SlurmTestCluster(root=tmp_path_factory.mktemp("slurm"), tag=f"mls{os.getpid()}")
    try:
        yield cluster.start()
    finally:
        cluster.stop()
