"""Actor class and method metadata: the ``@method`` decorator, keyword-only constructor rule, type checks.

Metadata is computed once per class from type hints. The caller uses it to refuse bad calls before anything
reaches the wire; the server uses the same metadata to route calls to the right lane.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from runtime.core.called_by_name import by_name, sync_on_loop
from runtime.core.errors import ActorDefinitionError, CallRejected
from runtime.core.stream_hints import STREAM_MARK, is_generator_function, stream_variant, yield_hint
from runtime.core.type_checks import DeepCheck, deep_check, hint_name, is_checked_result, matches, short
from transport.type_registry import is_registrable, register_type

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_GROUP = "default"
#: ``method@group`` on the wire: the call runs in ``group`` (``handle.m.options(concurrency_group=...)``).
GROUP_SEPARATOR = "@"
#: Tasks of async methods allowed at once per actor unless the group says otherwise (as in Ray).
DEFAULT_ASYNC_CONCURRENCY = 1000
_MAX_WRAPPERS = 8  # how many decorators deep @method options are looked for


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
    #: The return annotation to check results against, or None (``-> None``, ``Any`` or none at all).
    returns: Any = None
    #: Checks beyond the shallow one, by parameter name (and "return"), for hints that need pydantic
    #: (constraints in ``Annotated[...]``, TypedDicts): see runtime.core.type_checks.
    deep: dict[str, DeepCheck] = dataclasses.field(default_factory=dict)
    #: A generator method (sync or async): a call streams its items (``returns`` is then the items' type);
    #: ``stream_call``: this info is the streaming call's (``name~stream`` on the wire, runtime.core.stream_hints).
    streams: bool = False
    stream_call: bool = False

    @functools.cached_property
    def _deep_positions(self) -> tuple[tuple[int, str], ...]:
        """(position after ``self``, name) of the plain parameters with a deep check."""
        names = self._plain[0] if self._plain is not None else ()
        return tuple((index, name) for index, name in enumerate(names) if name in self.deep)

    @functools.cached_property
    def _plain(self) -> tuple[tuple[str, ...], frozenset[str]] | None:
        """(names, required names) of the parameters after ``self`` when all are plain positional-or-keyword."""
        params = list(self.signature.parameters.values())[1:]
        if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):
            return None
        return tuple(p.name for p in params), frozenset(p.name for p in params if p.default is p.empty)

    @functools.cached_property
    def _positional_hints(self) -> tuple[Any, ...] | None:
        """The hints of the plain parameters, in order, when none needs a deep check (else None)."""
        if self._plain is None or self.deep:
            return None
        return tuple(self.hints.get(name) for name in self._plain[0])

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any], *, actor: str) -> None:
        """Check arity and types against the hints; raises CallRejected naming the argument."""
        hints = self._positional_hints
        if hints is not None and not kwargs and len(args) == len(hints):  # the common call: every argument given
            for hint, value in zip(hints, args, strict=True):  # by position, each of its exact type or matching
                if type(value) is not hint and hint is not None and not matches(value, hint):
                    break
            else:
                return
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
            if hint is not None and type(value) is not hint and not matches(value, hint):  # exact type: a match
                self._check(name, hint, value, actor)
        for name, value in kwargs.items():
            self._check(name, hints.get(name), value, actor)
        if self.deep:
            for index, name in self._deep_positions:
                if index < count:
                    self._check(name, hints[name], args[index], actor)
        return True

    def _check(self, name: str, hint: Any, value: Any, actor: str) -> None:
        if hint is None:
            return
        problem = None if matches(value, hint) else ""
        if problem is None and name in self.deep:
            problem = self.deep[name](value)
        if problem is not None:
            raise CallRejected(
                f"argument {name!r} of {actor}.{self.name} expects {hint_name(hint)}, "
                f"got {type(value).__name__}: {short(value)}{': ' if problem else ''}{problem}"
            )

    def check_result(self, value: Any, *, actor: str) -> None:
        """Raise TypeError naming the method, the annotation and what came back when ``value`` (what the method
        returned) does not match its return annotation."""
        hint = self.returns
        if hint is None or (type(value) is hint and "return" not in self.deep):
            return
        problem = None if matches(value, hint) else ""
        if problem is None and "return" in self.deep:
            problem = self.deep["return"](value)
        if problem is not None:
            raise TypeError(
                f"{actor}.{self.name} returned {type(value).__name__}: {short(value)}, but its return annotation "
                f"is {hint_name(hint)}{': ' if problem else ''}{problem}"
            )


@dataclasses.dataclass(frozen=True)
class ActorClassInfo:
    """Everything the runtime needs to know about an actor class."""

    cls: type
    path: str
    methods: dict[str, MethodInfo]
    concurrency_groups: dict[str, int]
    #: ``method@group`` variants asked for so far (see :meth:`method`).
    _in_groups: dict[str, MethodInfo] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def method(self, name: str, *, actor: str) -> MethodInfo:
        info = self.methods.get(name)
        if info is not None:
            return info
        return self._in_group(name, actor)

    def _in_group(self, name: str, actor: str) -> MethodInfo:
        """``method@group``: the method, run in ``group`` (its own group otherwise); only looked at when ``name``
        is no method's name, so plain calls pay nothing for it."""
        info = self._in_groups.get(name)
        if info is not None:
            return info
        if name.endswith(STREAM_MARK):
            info = self._in_groups[name] = stream_variant(self.method(name[: -len(STREAM_MARK)], actor=actor), actor)
            return info
        base, _, group = name.partition(GROUP_SEPARATOR)
        info = self.methods.get(base)
        if info is None or not group:
            known = ", ".join(sorted(self.methods)) or "none"
            raise CallRejected(f"actor {actor!r} ({self.path}) has no public method {base!r}; methods: {known}")
        if group not in self.concurrency_groups:
            raise CallRejected(
                f"actor {actor!r} ({self.path}) method {base!r}: no concurrency group {group!r}; declared groups: "
                f"{sorted(self.concurrency_groups)}"
            )
        if info.options.control_plane:
            raise CallRejected(f"actor {actor!r} method {base!r} is control-plane: it runs on no concurrency group")
        info = dataclasses.replace(info, options=MethodOptions(group, False))
        self._in_groups[name] = info
        return info

    @functools.cached_property
    def has_async_methods(self) -> bool:
        return any(m.is_async for m in self.methods.values())


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
    on_loop = sync_on_loop(cls)
    for name, function in inspect.getmembers(cls, inspect.isfunction):
        private, kind = name.startswith("_"), inspect.getattr_static(cls, name)
        if (private and (not by_name(cls) or name.startswith("__"))) or isinstance(kind, (staticmethod, classmethod)):
            continue  # static and class methods are not actor methods: they have no instance to run on
        where, signature = f"{class_path(cls)}.{name}", inspect.signature(function)
        if private and not _takes_self(signature):
            continue  # a private helper without `self` (called through the class): no actor method
        _check_receiver(where, signature)
        options = _method_options(where, function)
        if options.concurrency_group not in declared:
            raise ActorDefinitionError(
                f"{where} uses concurrency group {options.concurrency_group!r}, which is not "
                f"declared; declared groups: {sorted(declared)} (declare it in concurrency_groups={{...}})"
            )
        hints = _hints(function, cls)
        streams = is_generator_function(where, function, options.control_plane)
        returns = yield_hint(hints.get("return")) if streams else hints.get("return")
        returns = returns if is_checked_result(returns) else None
        checked = {**{n: h for n, h in hints.items() if n != "return"}, **({"return": returns} if returns else {})}
        deep = {n: check for n, h in checked.items() if (check := deep_check(h)) is not None}
        is_async = inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)
        is_async = is_async or (on_loop and not streams)  # a sync method of a Ray async actor: on its loop
        methods[name] = MethodInfo(name, signature, hints, is_async, options, returns, deep, streams)
    return ActorClassInfo(cls, class_path(cls), methods, declared)


def _takes_self(signature: inspect.Signature) -> bool:
    first = next(iter(signature.parameters.values()), None)
    kind = first.kind if first is not None else None
    named_self = first is not None and first.name == "self" and kind is not inspect.Parameter.KEYWORD_ONLY
    return kind is inspect.Parameter.VAR_POSITIONAL or named_self


def _check_receiver(where: str, signature: inspect.Signature) -> None:
    """Refuse a public function on the class that takes no ``self``: called on the instance, it would get the
    instance as its first argument (or fail on every call)."""
    if _takes_self(signature):
        return
    params = list(signature.parameters.values())
    first = params[0] if params else None
    took = f"its first parameter is {first.name!r}" if first is not None else "it takes no parameters"
    name, params = where.rpartition(".")[2], ", ".join(signature.parameters)
    raise ActorDefinitionError(
        f"{where}({params}) takes no `self` ({took}): an actor method is called on the instance, which would be "
        f"passed as that first argument. Write `def {name}(self, ...)`, make it a @staticmethod (not callable "
        "remotely), or make it private (a leading underscore)"
    )


def _method_options(where: str, function: Callable[..., Any]) -> MethodOptions:
    """The ``@method`` options of ``function``, or of what it wraps (``functools.wraps`` copies them, and marks
    ``__wrapped__``). A wrapper that hides them (a decorator without ``functools.wraps`` around a ``@method``
    function) is refused: it would run silently on the wrong lane."""
    layer: Any = function
    for _ in range(_MAX_WRAPPERS):
        options = getattr(layer, "__actor_method__", None)
        if isinstance(options, MethodOptions):
            return options
        layer = getattr(layer, "__wrapped__", None)
        if layer is None:
            break
    hidden = _hidden_options(function, _MAX_WRAPPERS)
    if hidden is not None and hidden != MethodOptions():
        raise ActorDefinitionError(
            f"{where} wraps a function marked {hidden} but does not carry those options itself (a decorator "
            "without functools.wraps), so it would run on the default lane; use functools.wraps(fn) in the "
            "decorator, or put @method(...) outermost"
        )
    return MethodOptions()


def _hidden_options(function: Any, depth: int) -> MethodOptions | None:
    """``@method`` options of a function that ``function`` holds in its closure or defaults (a wrapper's
    wrapped function), looked for ``depth`` wrappers deep."""
    if depth <= 0 or not inspect.isfunction(function):
        return None
    held = [*(function.__defaults__ or ()), *(function.__kwdefaults__ or {}).values()]
    for cell in function.__closure__ or ():
        try:
            held.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    for item in held:
        inner = getattr(item, "__func__", item) if inspect.ismethod(item) else item
        if not inspect.isfunction(inner):
            continue
        options = getattr(inner, "__actor_method__", None)
        if isinstance(options, MethodOptions):
            return options
        options = _hidden_options(inner, depth - 1)
        if options is not None:
            return options
    return None


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
    if by_name(cls):  # as Ray: no type checks, values travel as they are (typed or pickled)
        return {}
    try:
        hints = typing.get_type_hints(function, include_extras=True)  # keeps constraints in Annotated[...]
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


__all__ = [
    "DEFAULT_GROUP",
    "GROUP_SEPARATOR",
    "ActorClassInfo",
    "MethodInfo",
    "check_keyword_only_constructor",
    "class_info",
    "class_path",
    "matches",
    "method",
]
