"""``ray.experimental.state.api`` (Ray's state API, also ``ray.util.state``): actors by id, named actors listed.

Ray source read: python/ray/util/state/api.py (``get_actor(id)`` returns the actor's state record or None,
``list_actors()``). Here the state is what this session knows: the actors it started and the named ones.
"""

from __future__ import annotations

from typing import Any

from runtime.ray_compat import state
from runtime.ray_compat.resources import node_id


def _record(lease: Any) -> dict[str, Any]:
    constructed = (lease.spawning.done() and lease.state() != "DEAD") or None
    inner = lease.spawning.result() if constructed else None
    return {
        "actor_id": lease.actor_id() if constructed else lease.id,
        "class_name": lease.label,
        "state": lease.state(),
        "name": inner.actor_name if inner is not None and lease.keep else "",
        "pid": inner.pid if inner is not None else None,
        "node_id": node_id(),
    }


def list_actors(*, limit: int = 100, **_: Any) -> list[dict[str, Any]]:
    """The actors this session started, as Ray's state records (``actor_id``, ``class_name``, ``state``...)."""
    session = state.running()
    return [_record(lease) for lease in (session.actors if session else [])][:limit]


def get_actor(id: str, **_: Any) -> dict[str, Any] | None:
    """The state record of the actor with this id (``handle._actor_id.hex()``), or None as Ray returns."""
    for record in list_actors(limit=1 << 30):
        if record["actor_id"] == id:
            return record
    return None


__all__ = ["get_actor", "list_actors"]
