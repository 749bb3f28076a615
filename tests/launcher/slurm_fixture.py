"""A real Slurm for tests: munged, slurmctld and two slurmd (``node1``, ``node2``), each slurmd in its own network
namespace (tests/launcher/netns.sh: TAG-h1 10.200.78.11, TAG-h2 10.200.78.12), slurmctld and the clients in the
switch namespace TAG-c (10.200.78.1, the "login node"). Every file (config, munge key and socket, state, spool,
logs) is under one temp dir; ``stop`` kills every process it started, and whatever is left in the node
namespaces, by pid.

Debian's Slurm 22.05 in a container without systemd or cgroup delegation: ProctrackType=proctrack/linuxproc,
TaskPlugin=task/none, JobAcctGatherType=jobacct_gather/none, SlurmUser=root. slurmd still loads a cgroup plugin at
start and autodetects the cgroup version by statfs("/sys/fs/cgroup"): ``ip netns exec`` mounts a fresh sysfs for
the namespace, on which /sys/fs/cgroup is an empty sysfs directory ("No filesystem mounted on /sys/fs/cgroup",
slurmd exits), so the daemons enter the namespaces with ``nsenter --net`` (network namespace only), keeping the
container's /sys. Fake GPUs: two gres ``gpu`` per node, ``File=`` symlinks to /dev/null under the temp dir (Slurm
only needs a path per GPU to number them and set CUDA_VISIBLE_DEVICES in steps).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from launch_helpers import NETNS_SH, subprocess_env
from sshd_fixture import LISTENER_PIDS

SLURM_OCTET = "78"
NODES = ("node1", "node2")
GPUS_PER_NODE = 2
DAEMON_PIDS = LISTENER_PIDS  # munged, slurmctld, slurmd: the leak check ignores them as it does sshd listeners


def slurm_available() -> str | None:
    """None if a real Slurm can run here, else why not."""
    if os.geteuid() != 0:
        return "needs root (slurmd as root, network namespaces)"
    missing = [tool for tool in ("slurmctld", "slurmd", "munged", "srun", "sbatch", "salloc", "nsenter")
               if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists()]  # fmt: skip
    if missing:
        return f"needs {missing} (scripts/setup.sh installs slurm-wlm and munge)"
    return None


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@dataclass
class SlurmTestCluster:
    """The running cluster: ``env()`` for its clients, ``exec_argv`` to run them in the switch namespace."""

    root: Path
    tag: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def switch(self) -> str:
        return f"{self.tag}-c"

    def node_namespace(self, node: str) -> str:
        """The network namespace of ``node`` (``node2`` -> TAG-h2)."""
        return f"{self.tag}-h{node.removeprefix('node')}"

    def address(self, node: str) -> str:
        return f"10.200.{SLURM_OCTET}.{10 + int(node.removeprefix('node'))}"

    def env(self, **extra: str) -> dict[str, str]:
        """Environment of a Slurm client or launcher: SLURM_CONF, the test helpers importable, ``extra``; no
        allocation of the caller's leaks in."""
        env = {k: v for k, v in subprocess_env(**extra).items() if not k.startswith("SLURM_")}
        return {**env, "SLURM_CONF": str(self.root / "slurm.conf")}

    def exec_argv(self, namespace: str | None = None) -> list[str]:
        """Prefix that runs a command in a namespace (the switch, "login node", namespace by default)."""
        return [_binary("nsenter"), f"--net=/run/netns/{namespace or self.switch}"]

    def run(self, *argv: str, timeout_s: float = 30) -> str:
        """A Slurm client command in the switch namespace; its stdout (CalledProcessError on failure)."""
        done = subprocess.run([*self.exec_argv(), *argv], capture_output=True, text=True, timeout=timeout_s,
                              env=self.env(), check=True)  # fmt: skip
        return done.stdout

    def pids(self, node: str) -> set[int]:
        """Every pid in ``node``'s namespace."""
        out = subprocess.run(["ip", "netns", "pids", self.node_namespace(node)], capture_output=True, text=True)
        return {int(x) for x in out.stdout.split()}

    def stray_pids(self) -> dict[str, dict[int, str]]:
        """Per node, the processes in its namespace besides slurmd: a finished job leaves none."""
        out: dict[str, dict[int, str]] = {}
        for node in NODES:
            out[node] = {}
            for pid in self.pids(node) - DAEMON_PIDS:
                with contextlib.suppress(psutil.Error):
                    out[node][pid] = " ".join(psutil.Process(pid).cmdline())[:160]
        return out

    def assert_no_strays(self, timeout_s: float = 15.0) -> None:
        """Within ``timeout_s`` no process but slurmd is left on any node."""
        deadline = time.monotonic() + timeout_s
        while any(self.stray_pids().values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert self.stray_pids() == {node: {} for node in NODES}, "processes left on a node"

    def wait_idle(self, timeout_s: float = 30.0) -> None:
        """Both nodes idle (no job left)."""
        deadline = time.monotonic() + timeout_s
        states = ""
        while time.monotonic() < deadline:
            with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
                states = self.run("sinfo", "-h", "-N", "-o", "%N %T", timeout_s=10)
                if sorted(states.split()) == sorted([*NODES, *["idle"] * len(NODES)]):
                    return
            time.sleep(0.2)
        raise RuntimeError(f"the Slurm nodes are not idle within {timeout_s}s: {states!r}\n{self.logs()}")

    def logs(self) -> str:
        """The tail of every daemon's log (for a failure message)."""
        files = sorted(self.root.glob("log/*"))
        return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-2000:]}" for path in files)

    # ---- start / stop --------------------------------------------------------------------------------------------

    def start(self) -> SlurmTestCluster:
        subprocess.run([str(NETNS_SH), "down", self.tag], check=False)
        subprocess.run([str(NETNS_SH), "up", self.tag, SLURM_OCTET, str(len(NODES))], check=True)
        for sub in ("munge-key", "munge", "state", "log", "dev", *(f"spool/{n}" for n in NODES)):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        (self.root / "munge").chmod(0o755)  # the socket's directory: reachable by every client
        key = self.root / "munge-key" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        (self.root / "munge-key").chmod(0o700)
        munge = self.root / "munge"
        self._spawn("munged", [_binary("munged"), "-F", "--force", f"--socket={munge / 'sock'}",
                               f"--key-file={key}", f"--pid-file={munge / 'pid'}", f"--seed-file={munge / 'seed'}",
                               f"--log-file={self.root / 'log' / 'munged.log'}"])  # fmt: skip
        self._write_config()
        conf = str(self.root / "slurm.conf")
        self._spawn("slurmctld", [*self.exec_argv(), _binary("slurmctld"), "-D", "-f", conf])
        for node in NODES:
            ns = self.node_namespace(node)
            self._spawn(f"slurmd-{node}", [*self.exec_argv(ns), _binary("slurmd"), "-D", "-N", node, "-f", conf])
        self.wait_idle()
        return self

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = open(self.root / "log" / f"{name}.out", "wb")
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env(), start_new_session=True)
        out.close()
        self.procs.append(proc)
        DAEMON_PIDS.add(proc.pid)
        if name == "munged":  # clients need its socket
            deadline = time.monotonic() + 10
            while not (self.root / "munge" / "sock").exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"munged did not start: {self.logs()}")
                time.sleep(0.05)

    def _write_config(self) -> None:
        root = self.root
        gres = [f"NodeName={n} Name=gpu File={root / 'dev' / n}-gpu[0-{GPUS_PER_NODE - 1}]" for n in NODES]
        for node in NODES:
            for index in range(GPUS_PER_NODE):
                (root / "dev" / f"{node}-gpu{index}").symlink_to("/dev/null")
        (root / "gres.conf").write_text("\n".join(gres) + "\n")
        nodes = [f"NodeName={n} NodeAddr={self.address(n)} CPUs=2 RealMemory=1000 Gres=gpu:{GPUS_PER_NODE} "
                 "State=UNKNOWN" for n in NODES]  # fmt: skip
        lines = [
            "ClusterName=milestest",
            f"SlurmctldHost={socket.gethostname()}(10.200.{SLURM_OCTET}.1)",
            "AuthType=auth/munge", f"AuthInfo=socket={root / 'munge' / 'sock'}", "CredType=cred/munge",
            "SlurmUser=root", "SlurmdUser=root",
            f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool' / '%n'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={root / 'log' / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "GresTypes=gpu", "MpiDefault=none", "ReturnToService=2",
            "SlurmctldTimeout=10", "SlurmdTimeout=10", "InactiveLimit=0", "KillWait=3", "MinJobAge=30",
            "MessageTimeout=5", "SchedulerType=sched/backfill",
            *nodes,
            f"PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP",
        ]  # fmt: skip
        (root / "slurm.conf").write_text("\n".join(lines) + "\n")

    def stop(self) -> None:
        """Cancel every job, stop the daemons, kill what is left in the node namespaces (all by pid)."""
        with contextlib.suppress(Exception):
            self.run("scancel", "--full", "--user=root", timeout_s=10)
        for proc in reversed(self.procs):  # slurmd first, munged last
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            DAEMON_PIDS.discard(proc.pid)
        for node in NODES:  # stepds and tasks of a job that outlived its slurmd: ours, in our namespaces
            with contextlib.suppress(subprocess.CalledProcessError):
                for pid in self.pids(node):
                    with contextlib.suppress(psutil.Error):
                        psutil.Process(pid).kill()
        subprocess.run([str(NETNS_SH), "down", self.tag], check=False)
