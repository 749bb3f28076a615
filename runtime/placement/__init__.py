"""Placing actors on the hosts of a launch: the cluster ledger's requests, grants and views, and the launch's
placement API (``placement.nodes()``: the hosts, their resources and who holds them)."""

from runtime.placement.placement_api import (
    PLACEMENT_API_ENV,
    PlacementApi,
    PlacementUnavailable,
    api,
    holders,
    nodes,
    serve,
)
from runtime.placement.placement_types import (
    CPU,
    GPU,
    STRATEGIES,
    BundleView,
    Grant,
    GroupSpec,
    GroupView,
    LeaseView,
    NodeView,
    PlacementRefused,
    ResourceRequest,
    Strategy,
    check_resources,
)

__all__ = [
    "CPU",
    "GPU",
    "PLACEMENT_API_ENV",
    "STRATEGIES",
    "BundleView",
    "Grant",
    "GroupSpec",
    "GroupView",
    "LeaseView",
    "NodeView",
    "PlacementApi",
    "PlacementRefused",
    "PlacementUnavailable",
    "ResourceRequest",
    "Strategy",
    "api",
    "check_resources",
    "holders",
    "nodes",
    "serve",
]
