"""``ray.util``: placement groups and scheduling strategies (:mod:`runtime.ray_compat.placement`)."""

from runtime.ray_compat.placement import (
    PlacementGroup,
    get_placement_group,
    placement_group,
    remove_placement_group,
)
from runtime.ray_compat.util import scheduling_strategies

__all__ = [
    "PlacementGroup",
    "get_placement_group",
    "placement_group",
    "remove_placement_group",
    "scheduling_strategies",
]
