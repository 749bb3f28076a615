"""What ``spawn`` and ``attach`` settle before any process starts or any actor is constructed.

How the worker will find the class (a dotted path, or cloudpickle by value), the class's metadata (refusing a
class that breaks the rules of :mod:`runtime.metadata`, or whose method a handle attribute would shadow), the
construct options sent with ``__construct__``, and the checks of the spawn options themselves.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import cloudpickle

from runtime import name_registry
from runtime.builtin_methods import resolve_class
from runtime.call_store import StoreLimits
from runtime.errors import ActorDefinitionError
from runtime.handle import ActorHandle
from runtime.metadata import ActorClassInfo, class_info, class_path
from runtime.supervisor import check_max_restarts

DEFAULT_SPAWN_DEADLINE_S = 60.0
LIFETIMES = (None, "detached", "non_detached")


def class_and_ref(actor_class: type | str) -> tuple[type | None, str | bytes]:
    """The class (if importable here) and how the worker will find it: a dotted path, or cloudpickle by value."""
    if isinstance(actor_class, str):
        try:
            return resolve_class(actor_class), actor_class
        except ImportError:
            return None, actor_class  # importable only on the actor's host: the worker checks it
    if not inspect.isclass(actor_class):
        raise TypeError(f"actor_class must be a class or 'package.module:ClassName', got {actor_class!r}")
    if actor_class.__module__ == "__main__" or "<locals>" in actor_class.__qualname__:
        return actor_class, cloudpickle.dumps(actor_class)
    return actor_class, class_path(actor_class)


def checked_class_info(cls: type, concurrency_groups: dict[str, int] | None) -> ActorClassInfo:
    """The metadata of ``cls`` with ``concurrency_groups``; raises ActorDefinitionError for a class that breaks
    the rules, or one with a method that ``handle.<name>`` would never reach (see :func:`handle_attributes`)."""
    info = class_info(cls, tuple(sorted((concurrency_groups or {}).items())))
    shadowed = sorted(set(info.methods) & handle_attributes())
    if shadowed:
        raise ActorDefinitionError(_shadowed_message(cls, shadowed))
    return info


@functools.cache
def handle_attributes() -> frozenset[str]:
    """The public names ``handle.<name>`` finds on an :class:`ActorHandle` itself (its methods and properties,
    and the attributes its constructor sets), so an actor method of that name could only be called through
    ``handle.method(name)``. Read off ActorHandle and a handle built here, so the list follows the class."""
    sample = ActorHandle(endpoint="tcp://127.0.0.1:0", name="", class_path="", boot_id=None, host="", pid=0)
    names = {*dir(ActorHandle), *vars(sample)}
    return frozenset(name for name in names if not name.startswith("_"))


def _shadowed_message(cls: type, shadowed: list[str]) -> str:
    taken = handle_attributes()
    renames = ", ".join(f"{name!r} -> {_rename(name, taken)!r}" for name in shadowed)
    which = "methods" if len(shadowed) > 1 else "method"
    return (
        f"actor class {class_path(cls)}: {which} {', '.join(map(repr, shadowed))} would be shadowed by the actor "
        f"handle's own attributes (handle.{shadowed[0]} is the handle's, not a call to the actor); rename "
        f"{'them' if len(shadowed) > 1 else 'it'} ({renames}). Names a handle keeps for itself: {sorted(taken)}"
    )


def _rename(name: str, taken: frozenset[str]) -> str:
    """A name to suggest: ``get_pid`` for a value (``handle.pid``), ``actor_kill`` for a handle method."""
    is_method = callable(inspect.getattr_static(ActorHandle, name, None))
    for candidate in (f"actor_{name}" if is_method else f"get_{name}", f"{name}_"):
        if candidate not in taken:
            return candidate
    return f"{name}_method"


def check_spawn_options(max_restarts: int, lifetime: str | None, name: str | None, namespace: str) -> None:
    """Refuse bad ``spawn`` options (ValueError naming the option), before anything else happens."""
    check_max_restarts(max_restarts)
    if lifetime not in LIFETIMES:
        raise ValueError(f"lifetime must be None, 'non_detached' or 'detached', got {lifetime!r}")
    if name is not None:
        name_registry.check_name("name", name)
    if namespace:
        name_registry.check_name("namespace", namespace)


def construct_options(
    name: str | None,
    concurrency_groups: dict[str, int] | None,
    max_concurrency: int | None,
    limits: StoreLimits | None,
) -> dict[str, Any]:
    """The options ``__construct__`` takes beside the class and its kwargs."""
    return {
        "name": name,
        "concurrency_groups": concurrency_groups or {},
        "max_concurrency": max_concurrency,
        "limits": vars(limits) if limits else None,
    }
