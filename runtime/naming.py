"""Named actors: ``spawn(..., name="x", namespace="ns")`` and ``get_actor("x", namespace="ns")``.

Names live in this process and in a registry directory, one small JSON file (the handle's state) per name:
``MILES_ACTOR_REGISTRY`` (launchers set it on every host of a job), else one that the first spawning process of a
tree (a driver script) makes for itself and hands to every actor it spawns, and they to theirs; so ``get_actor``
works inside any actor of the same launch or driver with no setup. The registry is per host: a launcher writes
every cell's handle into each host's registry, and a name an actor registers is seen by processes on its host.

A name belongs to one live actor: spawning another under it raises ValueError (``get_if_exists=True`` returns
the live one instead); the name of an actor that died may be taken again. ``namespace`` scopes names (as Ray's):
the same name in two namespaces is two actors; the default namespace is the one the launcher's cells are in.
A file holds no secret (no spawn token): a handle from ``get_actor`` can call methods, not kill.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.errors import ActorNotFound

if TYPE_CHECKING:
    from runtime.handle import ActorHandle

REGISTRY_ENV = "MILES_ACTOR_REGISTRY"
DEFAULT_NAMESPACE = ""
_VALID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:+=@-]{0,199}")
_MAX_ENTRY_BYTES = 64 * 1024

_names: dict[tuple[str, str], ActorHandle] = {}
_lock = threading.Lock()
_own_dir: Path | None = None  # the registry this process made (it has no MILES_ACTOR_REGISTRY)


def check_name(what: str, value: str) -> None:
    """Refuse a name or namespace that could not be a file name of its own (e.g. ``../x``)."""
    if not isinstance(value, str) or not _VALID.fullmatch(value):
        raise ValueError(
            f"actor {what} {value!r} is not allowed: use 1 to 200 letters, digits and _ . : + = @ -, not starting "
            "with a dot or a dash"
        )


def registry_dir() -> Path:
    """This tree's registry: ``MILES_ACTOR_REGISTRY``, else a private directory made once (removed at exit)."""
    global _own_dir
    directory = os.environ.get(REGISTRY_ENV)
    if directory:
        return Path(directory)
    with _lock:
        if _own_dir is None:
            _own_dir = Path(tempfile.mkdtemp(prefix=f"miles-actors-{os.getpid()}-"))  # mode 0700
            atexit.register(shutil.rmtree, _own_dir, True)
        return _own_dir


def _entry_path(name: str, namespace: str) -> Path:
    base = registry_dir()
    return base / f"{name}.json" if namespace == DEFAULT_NAMESPACE else base / f"@{namespace}" / f"{name}.json"


def _read_entry(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as file:
            text = file.read(_MAX_ENTRY_BYTES + 1)
        state = json.loads(text) if len(text) <= _MAX_ENTRY_BYTES else None
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and isinstance(state.get("endpoint"), str) else None


@contextlib.contextmanager
def _locked(namespace: str) -> Iterator[None]:
    """Serialise claims of names in one registry directory (across processes of the host)."""
    lock_path = _entry_path("x", namespace).parent / ".lock"
    lock_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with lock_path.open("a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _write_entry(path: Path, handle: ActorHandle) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(handle.to_state()))
    tmp.replace(path)


def local_handle(name: str, namespace: str = DEFAULT_NAMESPACE) -> ActorHandle | None:
    """The live handle this process registered under the name, if any."""
    with _lock:
        handle = _names.get((namespace, name))
    return handle if handle is not None and handle.dead is None else None


def registered_state(name: str, namespace: str = DEFAULT_NAMESPACE) -> dict[str, Any] | None:
    """The registry entry under the name (a handle's state), if any."""
    return _read_entry(_entry_path(name, namespace))


def claim(name: str, handle: ActorHandle, namespace: str, *, replacing: dict[str, Any] | None) -> dict[str, Any] | None:
    """Register ``handle`` under the name unless another actor holds it; returns that holder's entry (the claim then
    failed). ``replacing``: an entry its caller found dead; it is taken over only if it is still the one there."""
    path = _entry_path(name, namespace)
    with _locked(namespace):
        current = _read_entry(path)
        if current is not None and current.get("endpoint") != handle.endpoint and current != replacing:
            return current
        _write_entry(path, handle)
    with _lock:
        _names[(namespace, name)] = handle
    return None


def register_name(name: str, handle: ActorHandle, namespace: str = DEFAULT_NAMESPACE) -> None:
    """Record ``handle`` under the name, whoever held it (launchers; ``spawn`` claims names with checks)."""
    check_name("name", name)
    _write_entry(_entry_path(name, namespace), handle)
    with _lock:
        _names[(namespace, name)] = handle


def refresh(handle: ActorHandle) -> None:
    """Rewrite the entries of ``handle`` (it restarted: a new boot id), so ``get_actor`` reaches the new one."""
    with _lock:
        keys = [key for key, held in _names.items() if held is handle]
    for namespace, name in keys:
        path = _entry_path(name, namespace)
        current = _read_entry(path)
        if current is not None and current.get("endpoint") == handle.endpoint:
            _write_entry(path, handle)


def forget(handle: ActorHandle) -> None:
    """Drop the names of ``handle`` (it was killed), here and in the registry where they still name it."""
    with _lock:
        keys = [key for key, held in _names.items() if held is handle]
        for key in keys:
            del _names[key]
    for namespace, name in keys:
        path = _entry_path(name, namespace)
        current = _read_entry(path)
        if current is not None and current.get("endpoint") == handle.endpoint:
            path.unlink(missing_ok=True)


def get_actor(name: str, namespace: str = DEFAULT_NAMESPACE) -> ActorHandle:
    """The actor registered under the name in ``namespace`` (as Ray's ``ray.get_actor``); raises ActorNotFound
    (a KeyError and a ValueError) listing the names known there."""
    check_name("name", name)
    if namespace:
        check_name("namespace", namespace)
    handle = local_handle(name, namespace)
    if handle is not None:
        return handle
    state = registered_state(name, namespace)
    if state is not None:
        from runtime.handle import ActorHandle

        try:
            return ActorHandle(**state)
        except TypeError:  # not a handle's state: a corrupt entry
            pass
    directory = _entry_path("x", namespace).parent
    known = sorted({p.stem for p in directory.glob("*.json")} | {n for ns, n in _names if ns == namespace})
    where = f"namespace {namespace!r}" if namespace else "the default namespace"
    raise ActorNotFound(f"no actor named {name!r} in {where}; known names there: {known or 'none'}")
