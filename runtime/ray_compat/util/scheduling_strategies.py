"""``ray.util.scheduling_strategies``."""

from runtime.ray_compat.placement import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

__all__ = ["NodeAffinitySchedulingStrategy", "PlacementGroupSchedulingStrategy"]
