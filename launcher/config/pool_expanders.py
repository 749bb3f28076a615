"""Pool expanders (packages rewrite their own pools of hosts.toml at plan time, so the launcher knows nothing of
what the pools do) and the built-in host "launcher"."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from launcher.errors import ConfigError

ENTRY_POINT_GROUP = "miles.pool_expanders"
LAUNCHER_HOST = "launcher"
LAUNCHER_HOST_WORKDIR = "launcher-host"  # under [launcher].workdir

PoolTable = dict[str, Any]
PoolExpander = Callable[[PoolTable], list[PoolTable]]


def registered_expanders() -> dict[str, EntryPoint]:
    """Entry points of ``miles.pool_expanders`` by actor class (``'pkg.module:Class'``), not loaded yet."""
    found: dict[str, EntryPoint] = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        actor_class = _actor_class(point.name)
        other = found.get(actor_class)
        if other is not None and other.value != point.value:
            raise ConfigError(
                f"two pool expanders are installed for {actor_class!r}: {other.value} and {point.value} (entry-point "
                f"group {ENTRY_POINT_GROUP!r}). Fix: uninstall one of the packages that register them."
            )
        found[actor_class] = point
    return found


def _actor_class(name: str) -> str:
    """``pkg.module.Class`` (an entry point's name cannot hold the colon) as hosts.toml writes it."""
    module, _, cls = name.strip().rpartition(".")
    return f"{module}:{cls}"


def expand_pools(data: dict[str, Any], *, label: str) -> dict[str, Any]:
    """``data`` (hosts.toml's tables) with every pool that has an expander replaced by what the expander returns.

    A package registers a function in the entry-point group ``miles.pool_expanders``: the entry point's name is an
    actor class written ``pkg.module.Class``, its value the function, ``pkg.module:function``. For each serve pool
    whose ``actor_class`` (``'pkg.module:Class'``) has one, the function gets the pool's raw table (before
    validation); the table it returns with the pool's own id takes the pool's place, the others (companion pools,
    not expanded again) go after every pool of the file. Only the expander's module is imported, never the actor
    class; the expanded plan is what ``miles-launch --dry-run`` shows and what runs."""
    pools = data.get("pools")
    if not isinstance(pools, list):
        return data
    expanders = None
    kept: list[Any] = []
    companions: list[PoolTable] = []
    for pool in pools:
        actor_class = _serve_actor_class(pool)
        if actor_class is None:
            kept.append(pool)
            continue
        expanders = registered_expanders() if expanders is None else expanders
        point = expanders.get(actor_class)
        if point is None:
            kept.append(pool)
            continue
        tables = _run_expander(point, pool, label)
        kept.append(next(table for table in tables if table.get("id") == pool.get("id")))
        companions.extend(table for table in tables if table.get("id") != pool.get("id"))
    _check_companion_ids(kept, companions, label)
    return {**data, "pools": kept + companions}


def _serve_actor_class(pool: Any) -> str | None:
    worker = pool.get("worker") if isinstance(pool, dict) else None
    if not isinstance(worker, dict) or worker.get("kind", "serve") != "serve":
        return None
    actor_class = worker.get("actor_class")
    return actor_class if isinstance(actor_class, str) else None


def _run_expander(point: EntryPoint, pool: PoolTable, label: str) -> list[PoolTable]:
    """The expander's tables for ``pool``, checked; ConfigError naming the pool and the expander otherwise."""
    where = f"{label}: pool {pool.get('id')!r}"
    which = f"pool expander {point.value} (entry point {point.name!r} of group {ENTRY_POINT_GROUP!r})"
    try:
        expander: PoolExpander = point.load()
    except Exception as exc:
        raise ConfigError(
            f"{where}: cannot load the {which}: {type(exc).__name__}: {exc}. Fix: reinstall the package that "
            "registers it (in a checkout: `pip install -e .`), or uninstall it if it is stale."
        ) from None
    try:
        tables = expander(copy.deepcopy(pool))
    except Exception as exc:
        kind = "" if isinstance(exc, ValueError) else f"{type(exc).__name__}: "
        raise ConfigError(f"{where}: {kind}{exc}\n(raised by the {which}; fix the pool's table in {label})") from None
    if not isinstance(tables, list) or not all(isinstance(table, dict) for table in tables):
        raise ConfigError(f"{where}: the {which} returned {type(tables).__name__}, not a list of pool tables")
    own = pool.get("id")
    others = [table.get("id") for table in tables if table.get("id") != own]
    if len(tables) - len(others) != 1 or not all(isinstance(i, str) for i in others) or len(set(others)) != len(others):
        raise ConfigError(
            f"{where}: the {which} returned pools {[table.get('id') for table in tables]}: it must return the pool "
            f"itself (id {own!r}) once, and companion pools of other, distinct ids"
        )
    return tables


def _check_companion_ids(pools: list[Any], companions: list[PoolTable], label: str) -> None:
    """A companion pool must not take the id of a pool of the file (or of another companion)."""
    taken = {pool.get("id") for pool in pools if isinstance(pool, dict)}
    for companion in companions:
        if companion["id"] in taken:
            raise ConfigError(
                f"{label}: a pool expander adds pool {companion['id']!r}, but that id is already taken. Fix: rename "
                f"the pool {companion['id']!r} of {label}, or set its owner's kwargs so it needs no companion pool."
            )
        taken.add(companion["id"])


def add_launcher_host(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the built-in host "launcher" when a pool names it and hosts.toml does not define it.

    That host is the machine miles-launch runs on: ``provider = "local"``, no GPUs, the launcher's own Python, a
    workdir under ``[launcher].workdir``, no extra env. It only takes the pools that name it (a pool without
    ``hosts`` is placed on the file's own hosts); a host called "launcher" in hosts.toml is used as written."""
    hosts, pools = data.get("hosts"), data.get("pools")
    if not isinstance(hosts, list) or not hosts or not isinstance(pools, list):
        return data
    names = [host["name"] for host in hosts if isinstance(host, dict) and isinstance(host.get("name"), str)]
    named = [pool for pool in pools if isinstance(pool, dict) and LAUNCHER_HOST in _listed(pool.get("hosts"))]
    if LAUNCHER_HOST in names or not named:
        return data
    launcher_host = {
        "name": LAUNCHER_HOST,
        "address": "localhost",
        "provider": "local",
        "gpus": 0,
        "python": sys.executable,
        "workdir": str(Path(data["launcher"]["workdir"]) / LAUNCHER_HOST_WORKDIR),
        "env": {},
    }
    placed = [_off_launcher_host(pool, names) for pool in pools]
    return {**data, "hosts": [*hosts, launcher_host], "pools": placed}


def _listed(hosts: Any) -> list[Any]:
    return hosts if isinstance(hosts, list) else []


def _off_launcher_host(pool: Any, names: list[str]) -> Any:
    """A pool placed anywhere (no ``hosts``, not colocated) gets the file's own hosts, never the built-in one."""
    if not isinstance(pool, dict) or pool.get("hosts") is not None or pool.get("colocate_with") is not None:
        return pool
    return {**pool, "hosts": list(names)}
