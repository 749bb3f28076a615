"""A real OpenSSH server for tests: generated host/client keys, its own sshd_config, started and pid-killed.

Optionally runs inside a network namespace (``ip netns exec NS sshd ...``). Needs root (sshd privilege
separation, logging in as the current user with a key) and the openssh-server + openssh-client packages.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
LISTENER_PIDS: set[int] = set()  # listening sshds started by fixtures (the leak check ignores them)


def sshd_available() -> str | None:
    """None if a real sshd can run here, else why not."""
    if os.geteuid() != 0:
        return "needs root (sshd, network namespaces)"
    if not Path(SSHD).exists() or shutil.which("ssh-keygen") is None:
        return "needs openssh-server and openssh-client (apt-get install openssh-server)"
    return None


@dataclass(frozen=True)
class SshKeys:
    """A host key, an authorized client key and a client key that is NOT authorized."""

    host_key: Path
    client_key: Path
    bad_client_key: Path
    authorized_keys: Path


def generate_keys(directory: Path) -> SshKeys:
    """ssh-keygen a host key, a client key (authorized) and a second client key (not authorized)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {name: directory / name for name in ("host_ed25519", "client_ed25519", "bad_client_ed25519")}
    for path in paths.values():
        if not path.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    authorized = directory / "authorized_keys"
    authorized.write_text(Path(str(paths["client_ed25519"]) + ".pub").read_text())
    authorized.chmod(0o600)
    return SshKeys(paths["host_ed25519"], paths["client_ed25519"], paths["bad_client_ed25519"], authorized)


class Sshd:
    """One sshd listening on ``address:port`` (inside ``netns`` if given)."""

    def __init__(self, workdir: Path, keys: SshKeys, address: str, port: int, netns: str | None = None) -> None:
        self.workdir, self.keys, self.address, self.port, self.netns = workdir, keys, address, port, netns
        self.proc: subprocess.Popen[bytes] | None = None
        self.user = getpass.getuser()
        self.log_path = workdir / "sshd.log"

    @property
    def pid(self) -> int:
        """Pid of the listening sshd."""
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout_s: float = 15.0) -> Sshd:
        """Write sshd_config, start sshd -D, wait until it listens."""
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    f"ListenAddress {self.address}",
                    f"HostKey {self.keys.host_key}",
                    "PidFile none",
                    f"AuthorizedKeysFile {self.keys.authorized_keys}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "UsePAM no",
                    "StrictModes no",
                    f"AllowUsers {self.user}",
                    "MaxStartups 100",
                    "MaxSessions 100",
                    "LogLevel INFO",
                    "",
                ]
            )
        )
        argv = [SSHD, "-D", "-e", "-f", str(config)]
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns, *argv]
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        LISTENER_PIDS.add(self.proc.pid)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited {self.proc.returncode}: {self.log_path.read_text()}")
            if "Server listening on" in self.log_path.read_text(errors="replace"):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd did not listen within {timeout_s}s: {self.log_path.read_text()}")

    def session_pids(self) -> list[int]:
        """Pids of everything below the listening sshd (sessions and what they run)."""
        try:
            return [p.pid for p in psutil.Process(self.pid).children(recursive=True)]
        except psutil.Error:
            return []

    def session_processes(self, marker: str) -> list[psutil.Process]:
        """The live processes below sshd whose command line contains ``marker``; one that ends (or is a zombie
        not yet reaped, e.g. a finished SSH session) while they are listed is left out."""
        found = []
        for pid in self.session_pids():
            with contextlib.suppress(psutil.Error):  # NoSuchProcess, ZombieProcess
                process = psutil.Process(pid)
                if marker in " ".join(process.cmdline()):
                    found.append(process)
        return found

    def stop(self) -> None:
        """Kill sessions below sshd (ours), then sshd itself, by pid."""
        if self.proc is None:
            return
        with contextlib.suppress(psutil.Error):
            children = psutil.Process(self.proc.pid).children(recursive=True)
            for child in children:
                with contextlib.suppress(psutil.Error):
                    child.kill()
            psutil.wait_procs(children, timeout=5)
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        LISTENER_PIDS.discard(self.proc.pid)
        self.proc = None
