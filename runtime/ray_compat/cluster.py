"""A ``ray.init`` session inside a launch: the launch's hosts are the cluster (:mod:`runtime.placement`), so
``ray.nodes()`` and the resource views report them, actors are placed on them and placement groups span them."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from runtime.caller.client import ClientRuntime
from runtime.placement import lease_owner
from runtime.placement.placement_api import CALL_DEADLINE_S, PlacementUnavailable, api, call, nodes
from runtime.placement.placement_types import Grant, NodeView, ResourceRequest


def joined() -> bool:
    """Whether this process runs inside a launch (miles-launch gave it the launch's placement API)."""
    try:
        api()
    except PlacementUnavailable:
        return False
    return True


def ray_nodes() -> list[dict[str, Any]]:
    """``ray.nodes()``: every host of the launch, as Ray describes a node."""
    here = this_node_id()
    return [
        {
            "NodeID": node.node_id,
            "Alive": node.alive,
            "NodeManagerAddress": node.address,
            "NodeManagerHostname": node.host,
            "Resources": _with_node_resource(node, node.total),
            "local": node.node_id == here,
        }
        for node in nodes()
    ]


def total(per_node: bool = False) -> dict[str, Any]:
    """``ray.cluster_resources()`` (the alive hosts summed), or by node id."""
    return _summed(lambda node: node.total, per_node)


def available(per_node: bool = False) -> dict[str, Any]:
    """``ray.available_resources()`` (free on the alive hosts), or by node id."""
    return _summed(lambda node: node.available, per_node)


def this_node_id() -> str | None:
    """This process's node: the launcher says it (``MILES_NODE_ID``), or its host does (``MILES_HOST``)."""
    found = os.environ.get("MILES_NODE_ID")
    if found:
        return found
    host = os.environ.get("MILES_HOST")
    return next((node.node_id for node in nodes() if node.host == host), None) if host else None


def host_of(node_id: str, what: str) -> str:
    """The host of a node id (ValueError naming the launch's nodes for one it does not have)."""
    known = {node.node_id: node.host for node in nodes()}
    if node_id not in known:
        shown = ", ".join(f"{host} ({key[:12]}...)" for key, host in known.items())
        raise ValueError(f"{what}: node {node_id!r} is not a node of this launch: {shown}")
    return known[node_id]


def host_at(address: str, what: str) -> str:
    """The host at ``address`` (Ray's ``node:<ip>`` resource names a node by its address)."""
    found = next((node.host for node in nodes() if node.address == address), None)
    if found is None:
        raise ValueError(f"{what}: no node of this launch has address {address!r}")
    return found


def as_ray_env() -> dict[str, str]:
    """What an actor placed on another host needs for ``import ray`` to be this package there, as here (the shim
    directory first on its ``PYTHONPATH``; hosts share this install's path, as a cluster's image does)."""
    if sys.modules.get("ray") is not sys.modules["runtime.ray_compat"]:
        return {}
    return {"PYTHONPATH": str(Path(__file__).with_name("shim"))}


def reserve(request: ResourceRequest, what: str, *, detached: bool) -> Grant:
    """Hold ``request`` on the launch now (PlacementRefused, a ValueError, saying what is short)."""
    lease_owner_id = lease_owner.owner()

    async def held() -> Grant:
        lease_owner.keep_renewing()
        return await call("reserve", request=request, label=what, owner=lease_owner_id, detached=detached)

    return ClientRuntime.get().run(held(), timeout_s=CALL_DEADLINE_S + 5, what=what)


def _with_node_resource(node: NodeView, resources: dict[str, float]) -> dict[str, float]:
    return {**resources, f"node:{node.address}": 1.0}  # Ray's per-node resource, which Ray code schedules on


def _summed(pick: Any, per_node: bool) -> dict[str, Any]:
    alive = [node for node in nodes() if node.alive]
    if per_node:
        return {node.node_id: _with_node_resource(node, pick(node)) for node in alive}
    summed: dict[str, float] = {}
    for node in alive:
        for name, amount in _with_node_resource(node, pick(node)).items():
            summed[name] = summed.get(name, 0.0) + amount
    return summed
