"""The name registry of a plain driver's tree: one small JSON file (a handle's state) per name, in a directory.

A driver's ``runtime.spawn`` only starts local processes, so its whole tree is on one host and shares the directory.
(A launch uses its launcher's name service instead: :mod:`runtime.names.name_service`.)
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runtime.names.name_registry import LISTED_NAMES

REGISTRY_ENV = "MILES_ACTOR_REGISTRY"
_MAX_ENTRY_BYTES = 64 * 1024

_lock = threading.Lock()
_own_dir: Path | None = None  # the registry this process made (it has no MILES_ACTOR_REGISTRY)


def registry_dir() -> Path:
    """This tree's registry: ``MILES_ACTOR_REGISTRY``, else a private directory made once (mode 0700, removed at
    exit). The first spawning process of a tree (a driver script) makes it and hands it to every actor it spawns,
    and they to theirs."""
    global _own_dir
    directory = os.environ.get(REGISTRY_ENV)
    if directory:
        return Path(directory)
    with _lock:
        if _own_dir is None:
            _own_dir = Path(tempfile.mkdtemp(prefix=f"miles-actors-{os.getpid()}-"))  # mode 0700
            atexit.register(shutil.rmtree, _own_dir, True)
        return _own_dir


class FileRegistry:
    """Names in the directory :func:`registry_dir` names, with the operations of
    :class:`runtime.names.name_registry.NameRegistry`; names and namespaces are checked by the caller. Claims are
    serialised with a file lock."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, namespace: str, name: str) -> Path:
        base = self.directory if not namespace else self.directory / f"@{namespace}"
        return base / f"{name}.json"

    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            with path.open("rb") as file:
                text = file.read(_MAX_ENTRY_BYTES + 1)
            state = json.loads(text) if len(text) <= _MAX_ENTRY_BYTES else None
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) and isinstance(state.get("endpoint"), str) else None

    def _write(self, path: Path, state: dict[str, Any]) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(path)

    @contextlib.contextmanager
    def _locked(self, namespace: str) -> Iterator[None]:
        """Serialise claims of names in one namespace (across processes of the host)."""
        lock_path = self._path(namespace, "x").parent / ".lock"
        lock_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with lock_path.open("a") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)

    def claim(
        self, namespace: str, name: str, state: dict[str, Any], replacing: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        path = self._path(namespace, name)
        with self._locked(namespace):
            current = self._read(path)
            if current is not None and current.get("endpoint") != state.get("endpoint") and current != replacing:
                return current
            self._write(path, state)
        return None

    def put(self, namespace: str, name: str, state: dict[str, Any]) -> None:
        self._write(self._path(namespace, name), state)

    def lookup(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(self._path(namespace, name))

    def forget(self, namespace: str, name: str, endpoint: str) -> bool:
        path = self._path(namespace, name)
        with self._locked(namespace):
            current = self._read(path)
            if current is None or current.get("endpoint") != endpoint:
                return False
            path.unlink(missing_ok=True)
        return True

    def refresh(self, namespace: str, name: str, state: dict[str, Any]) -> bool:
        path = self._path(namespace, name)
        with self._locked(namespace):
            current = self._read(path)
            if current is None or current.get("endpoint") != state.get("endpoint"):
                return False
            self._write(path, state)
        return True

    def names(self, namespace: str) -> list[str]:
        return sorted(p.stem for p in self._path(namespace, "x").parent.glob("*.json"))[:LISTED_NAMES]
