"""What ``spawn`` and ``attach`` settle before any process starts or any actor is constructed: how the worker will
find the class, the construct options, the checks of the spawn options (the class's own: runtime.caller.handle_names).
"""

from __future__ import annotations

import copyreg
import inspect
import io
import marshal
import types
from collections import ChainMap
from typing import Any

import cloudpickle

from runtime.actor.call_store import StoreLimits
from runtime.core.class_refs import resolve_class
from runtime.core.metadata import class_path
from runtime.names import name_registry

#: ``max_restarts=UNLIMITED``: restart however often it dies (Ray's -1).
UNLIMITED = -1


def check_max_restarts(max_restarts: object) -> None:
    if not isinstance(max_restarts, int) or isinstance(max_restarts, bool) or max_restarts < UNLIMITED:
        raise ValueError(f"max_restarts must be an int >= 0, or -1 for unlimited restarts; got {max_restarts!r}")


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
        return actor_class, dumps_by_value(actor_class)
    return actor_class, class_path(actor_class)


class _ScriptPickler(cloudpickle.Pickler):
    """cloudpickle that keeps where code comes from: cloudpickle names every code object's file "<dynamic-code>", so a
    class defined in a script would show that in its tracebacks; marshal (the .pyc format: same Python minor on both
    sides, which the launcher checks) keeps the script's file and lines."""

    dispatch_table = ChainMap({types.CodeType: lambda code: (marshal.loads, (marshal.dumps(code),))},
                              cloudpickle.Pickler.dispatch_table, copyreg.dispatch_table)  # fmt: skip


def dumps_by_value(actor_class: type) -> bytes:
    """A script's (or a function's local) class pickled by value, with its file name in its code."""
    out = io.BytesIO()
    _ScriptPickler(out).dump(actor_class)
    return out.getvalue()


def check_lifetime(lifetime: object) -> None:
    """Refuse a ``lifetime`` that is not one of :data:`LIFETIMES` (an actor's or a placement group's)."""
    if lifetime not in LIFETIMES:
        raise ValueError(f"lifetime must be None, 'non_detached' or 'detached', got {lifetime!r}")


def check_spawn_options(max_restarts: int, lifetime: str | None, name: str | None, namespace: str) -> None:
    """Refuse bad ``spawn`` options (ValueError naming the option), before anything else happens."""
    check_max_restarts(max_restarts)
    check_lifetime(lifetime)
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
