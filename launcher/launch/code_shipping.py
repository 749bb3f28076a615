"""Ship the job's code to the hosts of a launch: packed once, sent to each host's agent only if it lacks it.

Workers on SSH hosts and Slurm nodes cannot import the launcher's working dir in place, as local ones do.
"""

from __future__ import annotations

import base64
import os
import threading
import time

from launcher.agent.agent_commands import CodeHave, CodePut, CodeUnpack
from launcher.config.hosts_config import ClusterConfig, HostConfig
from launcher.console.progress import Say
from launcher.errors import AgentError
from launcher.hosts.agent_link import AgentLink
from launcher.launch.code_package import MIB, CodePackage, code_packages, local_paths

CHUNK_BYTES = 256 * 1024  # raw bytes per code_put line (a third more in base64)


class CodeShipment:
    """The job's code for one launch: its packages (zipped on first need) and each host's ``sys.path`` entries."""

    def __init__(self, config: ClusterConfig, say: Say) -> None:
        self.config = config
        self._say = say
        self._lock = threading.Lock()
        self._packages: list[CodePackage] | None = None
        self._paths: dict[str, list[str]] = {}  # remote host -> where its agent unpacked each package

    def packages(self) -> list[CodePackage]:
        """The packages, listed and zipped once (ConfigError past the size limit)."""
        with self._lock:
            if self._packages is None:
                packages = code_packages(self.config)
                started = time.monotonic()
                for package in packages:
                    package.zip()
                if packages:
                    size = sum(p.zip_size for p in packages)
                    self._say(f"code: packed {_count(packages)} file(s), {size / MIB:.2f} MiB zipped, "
                              f"in {time.monotonic() - started:.2f}s")  # fmt: skip
                self._packages = packages
            return self._packages

    def ship(self, host: HostConfig, link: AgentLink) -> None:
        """Make every package present on ``host`` (nothing for a local host); AgentError names the host.

        Each package goes over the agent's own channel (the SSH connection, the ``srun`` step's pipes): the agent
        says whether ``WORKDIR/code/{digest}`` exists (a second launch of unchanged code sends nothing; on a workdir
        shared between nodes the first node's copy serves them all), else the zip goes in base64 chunks and the agent
        checks and unpacks it (launcher/agent/code_cache.py)."""
        if host.provider == "local":
            return
        packages = self.packages()
        if not packages:
            self._paths[host.name] = []
            return
        started, sent = time.monotonic(), 0
        paths = []
        timeout = self.config.launcher.connect_timeout_s + 10
        try:
            for package in packages:
                reply = link.request(CodeHave(package.digest), timeout_s=timeout)
                if not reply.get("present"):
                    sent += self._send(link, package)
                    reply = link.request(
                        CodeUnpack(package.digest, max_bytes=int(self.config.job.max_code_mib * MIB)),
                        timeout_s=timeout + package.zip_size / MIB,  # a second per MiB to check and unpack it
                    )
                paths.append(str(reply["path"]))
        except AgentError as exc:
            raise AgentError(
                f"host {host.name!r}: cannot ship the job's code to {host.workdir}/code ({exc}); check that the "
                "workdir is writable and has room"
            ) from None
        self._paths[host.name] = paths
        what = f"sent {sent / MIB:.2f} MiB" if sent else "already there (same digest), nothing sent"
        self._say(f"host {host.name}: code {what} in {time.monotonic() - started:.2f}s")

    def _send(self, link: AgentLink, package: CodePackage) -> int:
        source = package.zip_file
        assert source is not None, "packages() zips every package"
        size = package.zip_size
        for offset in range(0, size, CHUNK_BYTES):  # pread: the hosts' threads share the file, not its position
            chunk = base64.b64encode(os.pread(source.fileno(), CHUNK_BYTES, offset)).decode()
            link.send(CodePut(package.digest, size=size, offset=offset, data=chunk))
        return size

    def python_path(self, host: HostConfig) -> list[str]:
        """The entries a worker on ``host`` puts first on its ``sys.path``: each spawn carries them and the agent puts
        them first on the worker's PYTHONPATH (a local host: the working dir and py_modules, imported in place)."""
        if host.provider == "local":
            return local_paths(self.config.job)
        return list(self._paths.get(host.name, []))

    def close(self) -> None:
        """Delete the zips."""
        with self._lock:
            for package in self._packages or []:
                package.close()
            self._packages = None  # packed again if the provider connects again


def _count(packages: list[CodePackage]) -> int:
    return sum(len(p.files) for p in packages)
