"""``ray.util``: placement groups and scheduling strategies (:mod:`runtime.ray_compat.placement`), the node's
address, the named actors, ``ray.util.collective`` (:mod:`.collective`)."""

from __future__ import annotations

import importlib

from runtime.names import naming
from runtime.ray_compat import state
from runtime.ray_compat.resources import get_node_ip_address
from runtime.ray_compat.util import placement_group as _placement_group
from runtime.ray_compat.util import scheduling_strategies
from runtime.ray_compat.util.placement_group import *  # noqa: F403 - the submodule first, then its names over it, as Ray

__all__ = [*_placement_group.__all__, "get_node_ip_address", "list_named_actors", "scheduling_strategies"]


def list_named_actors(all_namespaces: bool = False) -> list[str] | list[dict[str, str]]:
    """The names of the live session's named actors (its namespace), as Ray lists them; ``all_namespaces=True``
    is refused: names are kept per namespace, give the namespace to ``ray.init``."""
    if all_namespaces:
        raise NotImplementedError(
            "ray.util.list_named_actors(all_namespaces=True): names are listed per namespace here; call it in a "
            "session of that namespace (ray.init(namespace=...))"
        )
    session = state.running()
    return naming.list_names((session.namespace if session is not None else "") or naming.DEFAULT_NAMESPACE)


def __getattr__(name: str) -> object:
    """A Ray API this module does not provide: an AttributeError naming it and what there is instead."""
    if name == "collective":  # imported on first use (``from ... import`` would come back here)
        return importlib.import_module("runtime.ray_compat.util.collective")
    raise AttributeError(
        f"ray.util.{name} is not provided by runtime.ray_compat (README 'Coming from Ray' lists what is); "
        f"available: {', '.join(sorted([*__all__, 'collective']))}"
    )
