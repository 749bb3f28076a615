"""A Ray actor class as this runtime spawns it: positional constructor parameters taken by name.

Ray constructors take positional arguments (``Counter.remote(5)``); this runtime's are keyword-only, so the wire
carries names only. ``.remote(*args, **kwargs)`` binds the arguments to the constructor's parameter names here,
with ``inspect.signature``, and the class is spawned as a subclass whose constructor is keyword-only and calls the
original one (:func:`keyword_class`). A constructor with positional-only parameters or ``*args`` cannot be bound
by name and is refused, naming the parameter.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any

from runtime.errors import ActorDefinitionError

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL)
_WRAPPED = "__ray_compat_class__"


def _parameters(cls: type) -> list[inspect.Parameter]:
    init = cls.__init__
    if init is object.__init__:
        return []
    return list(inspect.signature(init).parameters.values())[1:]


@functools.cache
def keyword_class(cls: type) -> type:
    """A subclass of ``cls`` whose constructor is keyword-only (calling the original one), sent by value: the
    module's name for ``cls`` is the ``@ray.remote`` wrapper, not the class, so it is not importable by name."""
    params = _parameters(cls)
    for param in params:
        if param.kind in _POSITIONAL:
            raise ActorDefinitionError(
                f"actor class {cls.__qualname__}: constructor parameter {param.name!r} is {param.kind.description}, "
                "which cannot be passed by name; give the constructor named parameters"
            )
    namespace: dict[str, Any] = {"__module__": cls.__module__, _WRAPPED: cls, "__doc__": cls.__doc__}
    if any(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):
        original = cls.__init__

        @functools.wraps(original)
        def __init__(self: Any, **kwargs: Any) -> None:
            original(self, **kwargs)

        keyword_only = [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD else p
            for p in params
        ]
        self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        __init__.__signature__ = inspect.Signature([self_param, *keyword_only])  # type: ignore[attr-defined]
        namespace["__init__"] = __init__
    wrapper = type(cls.__name__, (cls,), namespace)
    wrapper.__qualname__ = f"{cls.__qualname__}.<locals>.{cls.__name__}"  # sent by value (cloudpickle)
    return wrapper


def bind_arguments(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The constructor's arguments by parameter name; TypeError as Python's for a bad call."""
    if cls.__init__ is object.__init__:
        if args or kwargs:
            raise TypeError(f"{cls.__qualname__}() takes no arguments")
        return {}
    try:
        bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{cls.__qualname__}.remote(): {exc}") from None
    named = dict(bound.arguments)
    named.pop(next(iter(inspect.signature(cls.__init__).parameters)), None)  # self
    for param in _parameters(cls):
        if param.kind is inspect.Parameter.VAR_KEYWORD and param.name in named:
            named.update(named.pop(param.name))
    return named


def original_class(class_path: str) -> type | None:
    """The user's class behind a spawned actor's class path, if its module is loaded here (never imports)."""
    module_name, _, qualname = class_path.partition(":")
    target: Any = sys.modules.get(module_name)
    qualname = qualname.split(".<locals>.")[0]
    for part in qualname.split("."):
        target = getattr(target, part, None) if target is not None else None
    target = getattr(target, "__ray_actor_class__", target)  # the @ray.remote wrapper: the class it wraps
    return target if isinstance(target, type) else None
