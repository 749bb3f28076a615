"""Named actors: ``get_actor(name)`` finds an actor spawned under that name.

Names live in this process, and, when ``MILES_ACTOR_REGISTRY`` names a directory (launchers set it for every
process of a job), in one small JSON file per name there, so other processes on the host can look them up.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.handle import ActorHandle

REGISTRY_ENV = "MILES_ACTOR_REGISTRY"

_names: dict[str, ActorHandle] = {}
_lock = threading.Lock()


def _registry_dir() -> Path | None:
    directory = os.environ.get(REGISTRY_ENV)
    return Path(directory) if directory else None


def register_name(name: str, handle: ActorHandle) -> None:
    """Record ``handle`` under ``name`` (in this process and in the shared registry, if any)."""
    with _lock:
        _names[name] = handle
    directory = _registry_dir()
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".{name}.json.tmp"
        tmp.write_text(json.dumps(handle.to_state()))
        tmp.replace(directory / f"{name}.json")


def get_actor(name: str) -> ActorHandle:
    """The actor registered as ``name``; raises KeyError listing the known names."""
    with _lock:
        handle = _names.get(name)
    if handle is not None and handle.dead is None:
        return handle
    directory = _registry_dir()
    path = directory / f"{name}.json" if directory else None
    if path is not None and path.exists():
        from runtime.handle import ActorHandle

        return ActorHandle(**json.loads(path.read_text()))
    known = sorted(set(_names) | ({p.stem for p in directory.glob("*.json")} if directory else set()))
    raise KeyError(f"no actor named {name!r}; known names: {known or 'none'}")
