"""``ray._private.services.get_node_ip_address``: the address other hosts reach this one at."""

from runtime.ray_compat.resources import get_node_ip_address

__all__ = ["get_node_ip_address"]
