"""A Ray actor class as this runtime spawns it: Ray constructors take positional arguments (``Counter.remote(5)``),
this runtime's are keyword-only, so the arguments are bound to names here and the wire carries names only."""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any

from runtime.core.called_by_name import CALLED_BY_NAME

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL)
_WRAPPED = "__ray_compat_class__"
#: The constructor keyword that carries the arguments which cannot be passed by name.
POSITIONAL = "ray_positional_args"


def _parameters(cls: type) -> list[inspect.Parameter]:
    init = cls.__init__
    if init is object.__init__:
        return []
    return list(inspect.signature(init).parameters.values())[1:]


def _positional(cls: type) -> bool:
    return any(p.kind in _POSITIONAL for p in _parameters(cls))


@functools.cache
def keyword_class(cls: type) -> type:
    """A subclass of ``cls`` whose constructor is keyword-only (calling the original one), sent by value: the
    module's name for ``cls`` is the ``@ray.remote`` wrapper, not the class, so it is not importable by name.

    It is marked :data:`runtime.core.called_by_name.CALLED_BY_NAME`: its ``_private`` methods are callable, and no
    method name is reserved by this runtime's handles, as in Ray."""
    params = _parameters(cls)
    namespace: dict[str, Any] = {
        "__module__": cls.__module__, _WRAPPED: cls, "__doc__": cls.__doc__, CALLED_BY_NAME: True,
    }  # fmt: skip
    original = cls.__init__
    if _positional(cls):

        @functools.wraps(original)
        def __init__(self: Any, **kwargs: Any) -> None:
            original(self, *kwargs.pop(POSITIONAL, ()), **kwargs)

        keyword = [p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
        rest = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
        positional = inspect.Parameter(POSITIONAL, inspect.Parameter.KEYWORD_ONLY, default=())
        __init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD), positional, *keyword, *rest]
        )
        namespace["__init__"] = __init__
    elif any(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):

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
    """The constructor's arguments by parameter name, bound with ``inspect.signature``; what cannot be named
    (positional-only parameters, ``*args``) travels as a list under :data:`POSITIONAL`. TypeError as Python's for a
    bad call."""
    if cls.__init__ is object.__init__:
        if args or kwargs:
            raise TypeError(f"{cls.__qualname__}() takes no arguments")
        return {}
    try:
        bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{cls.__qualname__}.remote(): {exc}") from None
    if _positional(cls):
        return {POSITIONAL: list(bound.args[1:]), **bound.kwargs}
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
