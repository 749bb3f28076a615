"""This process's memberships in collective groups: the torch.distributed process group behind each name
(``get_group("g")`` inside a member's method; made from outside by :func:`runtime.collective.create_group`)."""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runtime.actor import builtin_methods
from runtime.actor.builtin_methods import Builtin, without_server
from runtime.actor.server_lanes import COLLECTIVE_LANE
from runtime.caller.handle import ActorHandle
from runtime.tensors.collective_store import StoreTable, actor_store, local_asker, remote_asker
from runtime.tensors.net_routes import interface_towards

if TYPE_CHECKING:
    import torch.distributed as dist

log = logging.getLogger(__name__)

BACKENDS = ("gloo", "nccl")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
MAX_WORLD_SIZE = 4096
MAX_GROUPS = 16  # groups one process is in or joining (a peer may ask it to open stores: each a socket and threads)


class CollectiveError(RuntimeError):
    """A collective group could not be made, joined or used (the message names the group and the member)."""


@dataclass
class GroupMember:
    """This process's place in one group."""

    name: str
    backend: str
    rank: int
    world_size: int
    timeout_s: float
    members: list[ActorHandle]  # by rank
    group: dist.ProcessGroup
    send_lock: threading.Lock  # NCCL needs one op at a time per communicator; gloo sends take it too (cheap)

    def peer_name(self, rank: int) -> str:
        handle = self.members[rank] if 0 <= rank < len(self.members) else None
        return f"{handle.actor_name} (rank {rank})" if handle is not None else f"rank {rank}"


_lock = threading.Lock()
_groups: dict[str, GroupMember] = {}
_env_lock = threading.Lock()
_stores: dict[str, StoreTable] = {}  # name -> the keys rank 0 keeps until its own join takes them
_tables: dict[str, StoreTable] = {}  # name -> the keys of a group this process is rank 0 of (until it leaves)


def check_group_options(name: Any, backend: Any, world_size: Any, timeout_s: Any) -> None:
    """Refuse a bad name, backend, size or timeout (they may come from a peer), naming the field."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"collective group name {name!r}: 1-128 of A-Z a-z 0-9 _ . - (starting with a letter/digit)")
    if backend not in BACKENDS:
        raise ValueError(f"collective group {name!r}: backend {backend!r} is not one of {list(BACKENDS)}")
    if not isinstance(world_size, int) or not 1 <= world_size <= MAX_WORLD_SIZE:
        raise ValueError(f"collective group {name!r}: world size {world_size!r} must be 1..{MAX_WORLD_SIZE}")
    if not isinstance(timeout_s, (int, float)) or not 0 < timeout_s <= 86_400:
        raise ValueError(f"collective group {name!r}: timeout_s {timeout_s!r} must be in (0, 86400] seconds")


def _check_room(name: str) -> None:
    """Under ``_lock``: refuse a group past :data:`MAX_GROUPS` (joined plus stores opened to join)."""
    if len(_groups) + len(_stores) >= MAX_GROUPS:
        raise CollectiveError(f"collective group {name!r}: this process is in {MAX_GROUPS} groups already "
                              "(destroy_group the ones you are done with)")  # fmt: skip


def open_store(name: str, world_size: int, timeout_s: float) -> dict[str, Any]:
    """Rank 0: open the group's rendezvous keys here (reached with ``__collective_store__``)."""
    check_group_options(name, "gloo", world_size, timeout_s)
    with _lock:
        if name in _groups or name in _stores:
            raise CollectiveError(f"this process is already in (or joining) collective group {name!r}")
        _check_room(name)
        _stores[name] = _tables[name] = StoreTable(name)
    return {"name": name, "world_size": world_size}


def store_operation(name: str, op: str, args: list[Any]) -> Any:
    """A member's operation on the keys of group ``name``, which this process is rank 0 of."""
    with _lock:
        table = _tables.get(name)
    if table is None:
        raise CollectiveError(f"this process keeps no rendezvous for collective group {name!r} (not its rank 0)")
    return table.apply(op, args)


def join(
    name: str,
    backend: str,
    rank: int,
    world_size: int,
    host: str,
    timeout_s: float,
    members: list[ActorHandle],
) -> dict[str, Any]:
    """Join group ``name`` as ``rank``; blocks until every member joined or ``timeout_s`` passed."""
    check_group_options(name, backend, world_size, timeout_s)
    if not isinstance(members, list) or not all(isinstance(m, ActorHandle) for m in members):
        raise ValueError(f"collective group {name!r}: members must be a list of actor handles, by rank")
    if not isinstance(rank, int) or not 0 <= rank < world_size or len(members) != world_size:
        raise ValueError(f"collective group {name!r}: rank {rank!r} / {len(members)} members for size {world_size}")
    timeout = datetime.timedelta(seconds=timeout_s)
    with _lock:
        if name in _groups:
            raise CollectiveError(f"this process is already rank {_groups[name].rank} of collective group {name!r}")
        table = _stores.pop(name, None)
        if table is None:
            _check_room(name)
    if rank == 0 and table is None:
        raise CollectiveError(f"collective group {name!r}: rank 0 joined without hosting the store (open it first)")
    ask = local_asker(table) if table is not None else remote_asker(members[0], name)
    store = actor_store(name, ask)
    with _gloo_interface_towards(host if backend == "gloo" else None):
        group = new_process_group(store, rank=rank, world_size=world_size, backend=backend, name=name, timeout=timeout)
    entry = GroupMember(name, backend, rank, world_size, float(timeout_s), list(members), group, threading.Lock())
    with _lock:
        _groups[name] = entry
    log.info("joined collective group %s as rank %d of %d (%s)", name, rank, world_size, backend)
    return {"name": name, "rank": rank, "world_size": world_size}


@contextlib.contextmanager
def _gloo_interface_towards(host: str | None) -> Iterator[None]:
    """While a gloo group is made: unless the user set ``GLOO_SOCKET_IFNAME``, gloo binds the interface that routes
    to rank 0's host (else it resolves the hostname, often to loopback, and peers on other hosts cannot reach it)."""
    interface = interface_towards(host) if host is not None and "GLOO_SOCKET_IFNAME" not in os.environ else None
    if interface is None:
        yield
        return
    with _env_lock:  # the variable is process-wide: one group made at a time while it is set
        os.environ["GLOO_SOCKET_IFNAME"] = interface
        try:
            yield
        finally:
            os.environ.pop("GLOO_SOCKET_IFNAME", None)


def new_process_group(
    store: Any, *, rank: int, world_size: int, backend: str, name: str, timeout: datetime.timedelta
) -> dist.ProcessGroup:
    """A process group over ``store`` outside the default group (SGLang's ``init_custom_process_group``); blocks
    until all ``world_size`` ranks are in.

    Built as SGLang builds its weight-update group (``srt/utils/common.py``): ``PrefixStore(name, store)`` and
    ``_new_process_group_helper``, outside the default process group, so a member may be in its own
    ``init_process_group`` world (a trainer) and in groups too. torch is imported only when a group is joined."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    store.set_timeout(timeout)
    group, _ = c10d._new_process_group_helper(
        world_size, rank, [], dist.Backend(backend), dist.PrefixStore(name, store),
        group_name=name, backend_options=None, timeout=timeout,
    )  # fmt: skip
    c10d._world.pg_group_ranks[group] = {i: i for i in range(world_size)}
    return group


def member(name: str) -> GroupMember:
    """This process's membership of ``name``, or CollectiveError naming the groups it is in."""
    with _lock:
        entry = _groups.get(name)
        names = sorted(_groups)
    if entry is None:
        raise CollectiveError(
            f"this process is not a member of collective group {name!r} (member of: {names or 'none'}); "
            "make it with runtime.collective.create_group(handles, name=...)"
        )
    return entry


def get_group(name: str) -> dist.ProcessGroup:
    """The torch.distributed process group of ``name`` (in a member's methods)."""
    return member(name).group


def group_names() -> list[str]:
    with _lock:
        return sorted(_groups)


def leave(name: str) -> bool:
    """Leave ``name`` (destroy the process group here); False if this process was not in it."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    with _lock:
        entry = _groups.pop(name, None)
        _stores.pop(name, None)
        _tables.pop(name, None)
    if entry is None:
        return False
    try:
        dist.destroy_process_group(entry.group)
    except Exception:  # a group whose peer died may refuse a clean shutdown; it is unregistered either way
        c10d._world.pg_group_ranks.pop(entry.group, None)
    log.info("left collective group %s (rank %d)", name, entry.rank)
    return True


# Joins block, so they run on the collective lane, beside whatever method runs; rendezvous keys are read on the loop.
builtin_methods.register("__collective_open__", Builtin(without_server(open_store), lane=COLLECTIVE_LANE))
builtin_methods.register("__collective_join__", Builtin(without_server(join), lane=COLLECTIVE_LANE))
builtin_methods.register("__collective_store__", Builtin(without_server(store_operation)))
builtin_methods.register("__collective_leave__", Builtin(without_server(leave)))
