"""The host's side of code shipping: the job's code packages, cached by digest under ``WORKDIR/code``.

Hosts that cannot import the launcher's working dir get the job's code from here, sent once per digest.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import stat
import zipfile
from pathlib import Path, PurePosixPath
from typing import IO, Any

from launcher.agent.agent_commands import CodeHave, CodePut, CodeUnpack

DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
MAX_ZIP_BYTES = 2 * 1024**3  # whatever the launcher says, never more than this
MAX_ENTRIES = 200_000
CACHE_DIR = "code"


class CodeCache:
    """Received packages of one agent: ``WORKDIR/code/{digest}`` directories, and zips still arriving.

    The launcher asks whether the host holds a digest (``code_have``); if not it streams the zip in chunks
    (``code_put``) and asks for it to be unpacked (``code_unpack``). The agent checks everything it is sent: the
    digest is a sha256 in hex and must be the zip's own, the zip is bounded in bytes, entries and unpacked size, and
    no entry may be absolute, climb out with ``..``, be a link or replace a file."""

    def __init__(self, workdir: Path) -> None:
        self.root = workdir / CACHE_DIR
        self._incoming: dict[str, tuple[IO[bytes], Path, int]] = {}  # digest -> (file, path, declared size)
        self._failed: dict[str, str] = {}  # digest -> why a chunk was refused (said by code_unpack)

    def path(self, digest: str) -> Path:
        """Where the package ``digest`` is (or will be) unpacked."""
        if not DIGEST_RE.match(digest):
            raise ValueError(f"code digest must be 64 hex digits, got {digest[:80]!r}")
        return self.root / digest

    def have(self, command: CodeHave) -> dict[str, Any]:
        """``code_have {digest}`` -> ``{path, present}``."""
        path = self.path(command.digest)
        return {"path": str(path), "present": path.is_dir()}

    def put(self, command: CodePut) -> None:
        """``code_put {digest, size, offset, data}``: one base64 chunk, written at ``offset`` (in order); a chunk
        refused drops the package, and ``code_unpack`` says why (chunks get no reply)."""
        digest = command.digest
        self.path(digest)
        if digest in self._failed:
            return
        try:
            self._put(digest, command.size, command.offset, command.data)
        except (ValueError, OSError) as exc:
            self._drop(digest)
            self._failed[digest] = str(exc)

    def _put(self, digest: str, size: int, offset: int, text: str) -> None:
        if not 0 < size <= MAX_ZIP_BYTES:
            raise ValueError(f"code package of {size} bytes (at most {MAX_ZIP_BYTES})")
        if digest not in self._incoming:
            self.root.mkdir(parents=True, exist_ok=True)
            part = self.root / f".incoming-{digest}-{os.getpid()}"
            self._incoming[digest] = (open(part, "wb"), part, size)  # closed by unpack() or close()
        out, _, declared = self._incoming[digest]
        data = base64.b64decode(text, validate=True)
        if offset != out.tell() or offset + len(data) > declared:
            raise ValueError(f"code chunk at {offset} (+{len(data)}) does not follow {out.tell()} of {declared}")
        out.write(data)

    def unpack(self, command: CodeUnpack) -> dict[str, Any]:
        """``code_unpack {digest, max_bytes}``: check the received zip and unpack it -> ``{path}``."""
        digest, max_bytes = command.digest, min(command.max_bytes, 4 * MAX_ZIP_BYTES)
        target = self.path(digest)
        if digest in self._failed:
            raise ValueError(f"code package {digest[:12]}: {self._failed.pop(digest)}")
        if target.is_dir():
            self._drop(digest)
            return {"path": str(target)}
        if digest not in self._incoming:
            raise ValueError(f"no code package {digest[:12]} was sent")
        out, part, declared = self._incoming.pop(digest)
        # Unpacked into a fresh directory renamed into place whole: a reader (or a second agent on a shared
        # workdir) sees all of it or nothing.
        staging = self.root / f".unpacking-{digest}-{os.getpid()}"
        try:
            out.close()
            if part.stat().st_size != declared or _sha256(part) != digest:
                raise ValueError(f"code package {digest[:12]}: received bytes do not match its digest")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            safe_extract(part, staging, max_bytes=max_bytes)
            try:
                staging.rename(target)
            except OSError:  # another agent (a shared workdir) put the same digest there first
                if not target.is_dir():
                    raise
        finally:
            part.unlink(missing_ok=True)
            shutil.rmtree(staging, ignore_errors=True)
        return {"path": str(target)}

    def _drop(self, digest: str) -> None:
        out, part, _ = self._incoming.pop(digest, (None, None, 0))
        if out is not None and part is not None:
            out.close()
            part.unlink(missing_ok=True)

    def close(self) -> None:
        """Remove zips that never finished arriving."""
        for digest in list(self._incoming):
            self._drop(digest)


def safe_extract(archive: Path, dest: Path, *, max_bytes: int) -> None:
    """Unpack ``archive`` into the empty directory ``dest``: regular files and directories only, every name
    relative and inside, each written once, at most ``max_bytes`` in all (counted as written, not as claimed)."""
    written = 0
    with zipfile.ZipFile(archive) as zf:
        entries = zf.infolist()
        if len(entries) > MAX_ENTRIES:
            raise ValueError(f"code package has {len(entries)} entries (at most {MAX_ENTRIES})")
        for info in entries:
            parts = _safe_parts(info.filename)
            mode = info.external_attr >> 16
            if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise ValueError(f"code package entry {info.filename!r} is not a file or a directory (a link?)")
            target = dest.joinpath(*parts)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "xb") as dst:  # x: a second entry of one name is refused
                while chunk := src.read(1024 * 1024):
                    written += len(chunk)
                    if written > max_bytes:
                        raise ValueError(f"code package unpacks to more than {max_bytes} bytes")
                    dst.write(chunk)
            target.chmod(0o755 if mode & 0o111 else 0o644)


def _safe_parts(name: str) -> tuple[str, ...]:
    path = PurePosixPath(name)
    parts = tuple(p for p in path.parts if p not in ("", "."))
    if path.is_absolute() or "\\" in name or not parts or ".." in parts or ":" in parts[0] or "\0" in name:
        raise ValueError(f"code package entry {name!r} is not a plain relative path")
    return parts


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as src:
        while chunk := src.read(1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def with_python_path(env: dict[str, str], paths: list[str] | None) -> dict[str, str]:
    """``env`` with ``paths`` first on PYTHONPATH (before what the environment already had)."""
    if paths:
        rest = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
        env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), *rest])
    return env
