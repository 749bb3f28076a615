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


def __getattr__(name: str) -> object:
    """A Ray API this module does not provide: an AttributeError naming it and what there is instead."""
    raise AttributeError(
        f"ray.util.{name} is not provided by runtime.ray_compat (README 'Coming from Ray' lists what is); "
        f"available: {', '.join(sorted(__all__))}"
    )
