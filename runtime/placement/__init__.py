"""Placing actors on the hosts of a launch: the cluster ledger's requests, grants and views."""

from runtime.placement.placement_types import (
    CPU,
    GPU,
    STRATEGIES,
    BundleView,
    Grant,
    GroupSpec,
    GroupView,
    NodeView,
    PlacementRefused,
    ResourceRequest,
    Strategy,
    check_resources,
)

__all__ = [
    "CPU",
    "GPU",
    "STRATEGIES",
    "BundleView",
    "Grant",
    "GroupSpec",
    "GroupView",
    "NodeView",
    "PlacementRefused",
    "ResourceRequest",
    "Strategy",
    "check_resources",
]
