"""The names an actor handle keeps for itself, and the class check that refuses an actor method they would shadow
(``handle.pid`` is the handle's own attribute, never a call of the actor's ``pid`` method)."""

from __future__ import annotations

import functools
import inspect

from runtime.caller.handle import ActorHandle
from runtime.core.called_by_name import by_name
from runtime.core.errors import ActorDefinitionError
from runtime.core.metadata import ActorClassInfo, class_info, class_path


def checked_class_info(cls: type, concurrency_groups: dict[str, int] | None) -> ActorClassInfo:
    """The metadata of ``cls`` with ``concurrency_groups``; raises ActorDefinitionError for a class that breaks
    the rules, or one with a method that ``handle.<name>`` would never reach (see :func:`handle_attributes`).

    Such a class is refused before it runs: by ``spawn``/``attach`` before any process starts, and by the worker's
    ``__construct__`` for a class only that host can import (miles' RpcWorkerHandle refuses the same names)."""
    info = class_info(cls, tuple(sorted((concurrency_groups or {}).items())))
    if by_name(cls):  # its callers' handles keep no such names (ray_compat's)
        return info
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
