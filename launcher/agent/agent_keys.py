"""The host agent's copy of the launch's CURVE keys: written under its workdir as the launcher sends them, removed
when the agent exits (``curve_keys`` is the launcher's side)."""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

from launcher.agent import agent_protocol as proto
from launcher.agent.agent_commands import CurveKeys

log = logging.getLogger(__name__)

_KEY_DIR_RE = re.compile(r"^" + re.escape(proto.CURVE_DIR_PREFIX) + r"[A-Za-z0-9_.-]+$")
_KEY_FILE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class HostKeys:
    """The key directories this agent wrote under ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.key_dirs: list[Path] = []  # removed on exit

    def write(self, command: CurveKeys) -> Path:
        """Write the cluster's CURVE key files into WORKDIR/dir (0700; each file 0600 from its first byte)."""
        name, files = command.dir, command.files
        if not _KEY_DIR_RE.match(name):
            raise ValueError(f"key directory {name!r} must match {_KEY_DIR_RE.pattern}")
        if not isinstance(files, dict) or not files:
            raise ValueError("files must be a non-empty mapping of file name to text")
        for file_name, text in files.items():
            if not _KEY_FILE_RE.match(str(file_name)) or not isinstance(text, str):
                raise ValueError(f"bad key file {file_name!r}: a plain file name and its text")
        directory = self.workdir / name
        if directory.is_symlink():
            raise ValueError(f"{directory} is a symlink; refusing to write keys through it")
        self.workdir.mkdir(parents=True, exist_ok=True)
        directory.mkdir(mode=0o700, exist_ok=True)
        if directory not in self.key_dirs:
            self.key_dirs.append(directory)
        os.chmod(directory, 0o700)
        for file_name, text in files.items():
            tmp = directory / f".{file_name}.tmp"
            tmp.unlink(missing_ok=True)
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            try:
                os.fchmod(fd, 0o600)  # whatever the umask
                os.write(fd, text.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, directory / file_name)
        return directory.resolve()

    def remove_all(self) -> None:
        """Delete every key directory written (a warning for one that stays)."""
        for directory in self.key_dirs:
            shutil.rmtree(directory, ignore_errors=True)
            if directory.exists():
                log.warning("could not remove the CURVE key directory %s", directory)
