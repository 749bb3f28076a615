"""The launcher's CURVE keys: one fresh set per launch, kept in the launch workdir and shipped to every host."""

from __future__ import annotations

import logging
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import psutil

from launcher.agent import agent_protocol as proto
from launcher.errors import LauncherError
from transport import security

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaunchKeys:
    """This launch's keys on the launcher host: its id, their directory, and the files every host agent gets.

    ``{launcher.workdir}/curve-{launch id}/`` (mode 0700, files 0600) holds the keys the launcher's own process
    uses; each host agent gets the same files over its (SSH or pipe) channel into
    ``{host workdir}/curve-{launch id}-{host}/`` and removes them when it exits; the launcher removes its copy at
    teardown. Directories left by a killed launcher are swept at the next launch from the same workdir (their pid
    is gone)."""

    launch_id: str
    directory: str
    files: dict[str, str]


def new_launch_id() -> str:
    """``{pid}-{random}``: unique per launch, and tells which process made it."""
    return f"{os.getpid()}-{secrets.token_hex(4)}"


def host_key_dir_name(launch_id: str, host: str) -> str:
    """The key directory's name under a host's workdir."""
    return f"{proto.CURVE_DIR_PREFIX}{launch_id}-{host}"


def create_launch_keys(workdir: Path, launch_id: str) -> LaunchKeys:
    """Generate this launch's keys in ``workdir/curve-{launch_id}``; LauncherError naming the path on failure."""
    sweep_stale(workdir)
    directory = workdir / f"{proto.CURVE_DIR_PREFIX}{launch_id}"
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        keys = security.generate_cluster_keys(directory)
    except (OSError, security.CurveKeyError) as exc:
        raise LauncherError(
            f"cannot create the CURVE keys in {directory} ([launcher] workdir): {exc}; "
            "fix the directory's permissions, or set [launcher] curve = false on a trusted network"
        ) from None
    return LaunchKeys(launch_id=launch_id, directory=keys.directory, files=key_files(keys.directory))


def key_files(directory: str | os.PathLike[str]) -> dict[str, str]:
    """Every key file of a key directory, by name (what a host agent writes back)."""
    files = {}
    for path in sorted(Path(directory).iterdir()):
        if path.is_file() and not path.name.startswith("."):
            files[path.name] = path.read_text()
    return files


def remove_keys(directory: str | os.PathLike[str] | None) -> None:
    """Delete a key directory (missing is fine)."""
    if directory is None:
        return
    shutil.rmtree(directory, ignore_errors=True)
    if Path(directory).exists():
        log.warning("could not remove the CURVE key directory %s", directory)


def sweep_stale(workdir: Path) -> list[Path]:
    """Remove ``curve-{pid}-*`` directories of launchers that are gone; returns what was removed."""
    removed = []
    if not workdir.is_dir():
        return removed
    for path in workdir.glob(f"{proto.CURVE_DIR_PREFIX}*"):
        pid_text = path.name[len(proto.CURVE_DIR_PREFIX) :].split("-", 1)[0]
        if not path.is_dir() or not pid_text.isdigit():
            continue
        if int(pid_text) != os.getpid() and not psutil.pid_exists(int(pid_text)):
            remove_keys(path)
            removed.append(path)
    return removed
