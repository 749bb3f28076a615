"""``ray._private.state``: ``available_resources_per_node`` and ``state.placement_group_table()``."""

from __future__ import annotations

from types import SimpleNamespace

from runtime.ray_compat import cluster
from runtime.ray_compat import state as session_state
from runtime.ray_compat.placement import placement_group_table
from runtime.ray_compat.resources import node_id


def available_resources_per_node() -> dict[str, dict[str, float]]:
    """What is free, by node id: the launch's hosts in a launch, else this machine's ledger."""
    if session_state.current().cluster:
        return cluster.available(per_node=True)
    return {node_id(): session_state.current().ledger.available()}


def total_resources_per_node() -> dict[str, dict[str, float]]:
    if session_state.current().cluster:
        return cluster.total(per_node=True)
    return {node_id(): dict(session_state.current().ledger.total)}


#: ``ray._private.state.state``: Ray's GlobalState object, of which Ray code calls ``placement_group_table()``.
state = SimpleNamespace(
    placement_group_table=placement_group_table,
    available_resources_per_node=available_resources_per_node,
    total_resources_per_node=total_resources_per_node,
)

__all__ = ["available_resources_per_node", "placement_group_table", "state", "total_resources_per_node"]
