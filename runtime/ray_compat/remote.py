"""``@ray.remote`` and ``@ray.remote(**options)`` on a class (an actor) or a function (a task)."""

from __future__ import annotations

import inspect
from typing import Any

from runtime.ray_compat.actors import ActorClass, make_actor_class
from runtime.ray_compat.tasks import RemoteFunction


def _make(target: Any, options: dict[str, Any]) -> ActorClass | RemoteFunction:
    if inspect.isclass(target):
        return make_actor_class(target, options)
    if callable(target):
        return RemoteFunction(target, options)
    raise TypeError(f"@ray.remote decorates a class or a function, got {type(target).__name__}")


def remote(*args: Any, **options: Any) -> Any:
    if len(args) == 1 and not options and (inspect.isclass(args[0]) or callable(args[0])):
        return _make(args[0], {})
    if args:
        raise TypeError(
            "The @ray.remote decorator must be applied either with no arguments and no parentheses, or with "
            "keyword arguments only, e.g. @ray.remote(num_gpus=1)"
        )
    return lambda target: _make(target, options)
