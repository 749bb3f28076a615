"""Actor class and method metadata: the ``@method`` decorator, keyword-only constructor rule, type checks.

Metadata is computed once per class from type hints. The caller uses it to refuse bad calls before anything
reaches the wire; the server uses the same metadata to route calls to the right lane.
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from runtime.errors import ActorDefinitionError, CallRejected
from transport.type_registry import is_registrable, register_type

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_GROUP = "default"
#: Tasks of async methods allowed at once per actor unless the group says otherwise (as in Ray).
DEFAULT_ASYNC_CONCURRENCY = 1000
_CHECKED_ITEMS = 64  # containers: check this many elements, not millions


@dataclasses.dataclass(frozen=True)
class MethodOptions:
    """What ``@method`` records on a function."""

    concurrency_group: str = DEFAULT_GROUP
    control_plane: bool = False


def method(
    fn: F | None = None, *, concurrency_group: str = DEFAULT_GROUP, control_plane: bool = False
) -> F | Callable[[F], F]:
    """Mark an actor method's lane.

    ``concurrency_group``: sync methods of one group run on that group's threads (the default group has one
    thread: calls run one at a time, in order). ``control_plane``: run on the actor's event loop, answering even
    while a long sync method runs; keep such methods quick and non-blocking.
    """

    def mark(function: F) -> F:
        function.__actor_method__ = MethodOptions(concurrency_group, control_plane)  # type: ignore[attr-defined]
        return function

    return mark(fn) if fn is not None else mark


@dataclasses.dataclass(frozen=True)
class MethodInfo:
    """One public method: how to call it and where it runs."""

    name: str
    signature: inspect.Signature
    hints: dict[str, Any]
    is_async: bool
    options: MethodOptions

    @functools.cached_property
    def _plain(self) -> tuple[tuple[str, ...], frozenset[str]] | None:
        """(names, required names) of the parameters after ``self`` when all are plain positional-or-keyword."""
        params = list(self.signature.parameters.values())[1:]
        if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):
            return None
        return tuple(p.name for p in params), frozenset(p.name for p in params if p.default is p.empty)

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any], *, actor: str) -> None:
        """Check arity and types against the hints; raises CallRejected naming the argument."""
        if self._plain is not None and self._bind_plain(args, kwargs, actor):
            return
        try:
            bound = self.signature.bind(None, *args, **kwargs)
        except TypeError as exc:
            raise CallRejected(f"bad arguments for {actor}.{self.name}{self.signature}: {exc}") from None
        for name, value in bound.arguments.items():
            hint = self.hints.get(name)
            if hint is None or name == "self":
                continue
            kind = self.signature.parameters[name].kind
            values = (
                value.values()
                if kind is inspect.Parameter.VAR_KEYWORD
                else (value if kind is inspect.Parameter.VAR_POSITIONAL else (value,))
            )
            for item in values:
                self._check(name, hint, item, actor)

    def _bind_plain(self, args: tuple[Any, ...], kwargs: dict[str, Any], actor: str) -> bool:
        """The fast path of :meth:`bind` for plain parameters; False when the slow path must explain an error."""
        names, required = self._plain
        count = len(args)
        if count > len(names):
            return False
        if kwargs or count < len(names):
            rest = names[count:]
            if any(name not in rest for name in kwargs) or any(n in required and n not in kwargs for n in rest):
                return False
        hints = self.hints
        for name, value in zip(names, args, strict=False):  # stops after the last positional argument
            hint = hints.get(name)
            if hint is not None and not matches(value, hint):
                self._check(name, hint, value, actor)
        for name, value in kwargs.items():
            self._check(name, hints.get(name), value, actor)
        return True

    def _check(self, name: str, hint: Any, value: Any, actor: str) -> None:
        if hint is not None and not matches(value, hint):
            raise CallRejected(
                f"argument {name!r} of {actor}.{self.name} expects {_hint_name(hint)}, "
                f"got {type(value).__name__}: {_short(value)}"
            )


@dataclasses.dataclass(frozen=True)
class ActorClassInfo:
    """Everything the runtime needs to know about an actor class."""

    cls: type
    path: str
    methods: dict[str, MethodInfo]
    concurrency_groups: dict[str, int]

    def method(self, name: str, *, actor: str) -> MethodInfo:
        info = self.methods.get(name)
        if info is None:
            known = ", ".join(sorted(self.methods)) or "none"
            raise CallRejected(f"actor {actor!r} ({self.path}) has no public method {name!r}; methods: {known}")
        return info


def class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def check_keyword_only_constructor(cls: type) -> None:
    """Refuse constructors with positional parameters, with a message that shows the fix."""
    init = cls.__init__
    if init is object.__init__:
        return
    for param in list(inspect.signature(init).parameters.values())[1:]:
        if param.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD):
            continue
        raise ActorDefinitionError(
            f"actor class {class_path(cls)}: constructor parameter {param.name!r} is {param.kind.description}; "
            "actor constructors must be keyword-only: write `def __init__(self, *, "
            f"{param.name}, ...)` and pass it as kwargs={{{param.name!r}: ...}}"
        )


@functools.cache
def class_info(cls: type, groups: tuple[tuple[str, int], ...] = ()) -> ActorClassInfo:
    """Metadata of ``cls``; ``groups`` gives extra concurrency groups as (name, max threads)."""
    check_keyword_only_constructor(cls)
    declared = dict(getattr(cls, "concurrency_groups", {}) or {})
    declared.update(groups)
    declared.setdefault(DEFAULT_GROUP, 1)
    if cls.__init__ is not object.__init__:
        _hints(cls.__init__, cls)  # registers the types of constructor arguments for the wire
    methods: dict[str, MethodInfo] = {}
    for name, function in inspect.getmembers(cls, inspect.isfunction):
        if name.startswith("_"):
            continue
        options = getattr(function, "__actor_method__", MethodOptions())
        if options.concurrency_group not in declared:
            raise ActorDefinitionError(
                f"{class_path(cls)}.{name} uses concurrency group {options.concurrency_group!r}, which is not "
                f"declared; declared groups: {sorted(declared)} (declare it in concurrency_groups={{...}})"
            )
        hints = _hints(function, cls)
        methods[name] = MethodInfo(
            name, inspect.signature(function), hints, inspect.iscoroutinefunction(function), options
        )
    return ActorClassInfo(cls, class_path(cls), methods, declared)


def coerce_constructor_kwargs(cls: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Turn plain dicts (from TOML/JSON configs) into the pydantic models the constructor's hints ask for."""
    if cls.__init__ is object.__init__:
        return kwargs
    hints = _hints(cls.__init__, cls)
    coerced = dict(kwargs)
    for name, value in kwargs.items():
        if not isinstance(value, dict):
            continue
        models = [h for h in (hints.get(name), *typing.get_args(hints.get(name))) if _is_model(h)]
        if models:
            try:
                coerced[name] = models[0].model_validate(value)
            except ValueError as exc:
                raise ValueError(f"{class_path(cls)}: constructor argument {name!r}: {exc}") from None
    return coerced


def _is_model(hint: Any) -> bool:
    return isinstance(hint, type) and hasattr(hint, "model_validate")


def _hints(function: Callable[..., Any], cls: type) -> dict[str, Any]:
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # unresolvable forward references: skip validation rather than refuse the class
        return {}
    for hint in hints.values():
        _register_hinted_types(hint)
    return hints


def _register_hinted_types(hint: Any) -> None:
    if is_registrable(hint):
        register_type(hint)
    for arg in typing.get_args(hint):
        _register_hinted_types(arg)


def matches(value: Any, hint: Any) -> bool:
    """A shallow, fast isinstance check of ``value`` against a type hint (unknown hints accept anything)."""
    if type(hint) is type and hint is not float:  # the common case first: a plain class
        return isinstance(value, hint)
    if hint is Any or hint is object or isinstance(hint, typing.TypeVar):
        return True
    if hint is None or hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    origin = typing.get_origin(hint)
    if origin is None:
        return isinstance(value, hint) if isinstance(hint, type) else True
    args = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return any(matches(value, arg) for arg in args)
    if origin is typing.Literal:
        return value in args
    if origin is typing.Annotated:
        return matches(value, args[0])
    if not isinstance(origin, type):
        return True
    if not isinstance(value, origin):
        return False
    return _items_match(value, origin, args)


def _items_match(value: Any, origin: type, args: tuple[Any, ...]) -> bool:
    if not args or isinstance(value, (str, bytes)):
        return True
    if issubclass(origin, cabc.Mapping) and len(args) == 2:
        items = list(value.items())[:_CHECKED_ITEMS]
        return all(matches(k, args[0]) and matches(v, args[1]) for k, v in items)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return all(matches(item, args[0]) for item in value[:_CHECKED_ITEMS])
        return len(value) == len(args) and all(matches(item, arg) for item, arg in zip(value, args, strict=True))
    if issubclass(origin, cabc.Iterable) and len(args) == 1 and isinstance(value, cabc.Sequence):
        return all(matches(item, args[0]) for item in value[:_CHECKED_ITEMS])
    return True


def _hint_name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) and not typing.get_args(hint) else repr(hint)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


__all__ = [
    "DEFAULT_GROUP",
    "ActorClassInfo",
    "MethodInfo",
    "check_keyword_only_constructor",
    "class_info",
    "class_path",
    "matches",
    "method",
]
