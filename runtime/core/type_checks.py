"""Checking a value against a type hint, on the caller before the wire and on the actor before (and after) a call:
a fast shallow tier for every call (:func:`matches`), pydantic for what it cannot see (:func:`deep_check`)."""

from __future__ import annotations

import collections.abc as cabc
import functools
import logging
import types
import typing
from collections.abc import Callable
from typing import Any

import typing_extensions

log = logging.getLogger(__name__)

_CHECKED_ITEMS = 64  # containers: check this many elements, not millions
_is_typeddict = typing_extensions.is_typeddict  # knows typing's and typing_extensions' TypedDicts

#: Problem with a value (a message), or None when it passes.
DeepCheck = Callable[[Any], "str | None"]


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
        if not isinstance(hint, type):
            return True
        return isinstance(value, dict) if _is_typeddict(hint) else isinstance(value, hint)
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


def is_checked_result(hint: Any) -> bool:
    """Whether a return annotation says anything to check (``-> None``, ``Any`` and ``object`` do not)."""
    return not (
        hint is None
        or hint is type(None)
        or hint is Any
        or hint is object
        or hint is typing.NoReturn
        or isinstance(hint, (typing.TypeVar, str))
    )


def deep_check(hint: Any) -> DeepCheck | None:
    """A check of what :func:`matches` cannot see in ``hint`` (constraints, TypedDict keys), or None when there is
    nothing more to check or pydantic cannot build a validator for it (then the shallow check is all there is).

    Built once per hint: pydantic's own ``TypeAdapter`` in strict mode, for constraints
    (``Annotated[int, Field(ge=1)]``) and TypedDicts (declared keys and value types); plain hints stay on the fast
    path."""
    if not _needs_pydantic(hint):
        return None
    import pydantic  # only actors that use such hints pay for the import

    try:
        adapter = _adapter(_for_pydantic(hint))
    except Exception as exc:  # a type pydantic knows nothing of, deep inside: keep the shallow check
        log.debug("no pydantic validator for %r: %s", hint, exc)
        return None

    def problem(value: Any) -> str | None:
        try:
            adapter.validate_python(value, strict=True)
        except pydantic.ValidationError as exc:
            return "; ".join(_describe_error(error) for error in exc.errors()[:3])
        return None

    return problem


def hint_name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) and not typing.get_args(hint) else repr(hint)


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _needs_pydantic(hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin is typing.Annotated or _is_typeddict(hint):
        return True
    if origin is None or origin is typing.Literal:
        return False
    return any(_needs_pydantic(arg) for arg in typing.get_args(hint))


def _adapter(hint: Any) -> Any:
    from pydantic import ConfigDict, PydanticUserError, TypeAdapter

    try:  # types pydantic does not know (numpy arrays, registered classes) are checked with isinstance
        return TypeAdapter(hint, config=ConfigDict(arbitrary_types_allowed=True))
    except PydanticUserError:  # a model, dataclass or TypedDict at the top carries its own config
        return TypeAdapter(hint)


def _for_pydantic(hint: Any) -> Any:
    """``hint`` with every TypedDict rebuilt as one pydantic accepts on this Python (on 3.11 and before, it takes
    only typing_extensions' TypedDict), refusing undeclared keys."""
    if _is_typeddict(hint):
        return _typed_dict_for_pydantic(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is None or origin is typing.Literal or not args:
        return hint
    if origin is typing.Annotated:
        return typing.Annotated[(_for_pydantic(args[0]), *args[1:])]
    rebuilt = tuple(_for_pydantic(arg) for arg in args)
    if rebuilt == args:
        return hint
    if origin is typing.Union or origin is types.UnionType:
        return typing.Union[rebuilt]  # noqa: UP007 (a union built from a tuple of types)
    return origin[rebuilt]


@functools.cache
def _typed_dict_for_pydantic(typed_dict: Any) -> Any:
    from pydantic import ConfigDict

    fields = {}
    for key, hint in typing.get_type_hints(typed_dict, include_extras=True).items():
        # An explicit Required/NotRequired decides; __required_keys__ misses them in string annotations.
        wrapper = typing_extensions.Required if key in typed_dict.__required_keys__ else typing_extensions.NotRequired
        while typing.get_origin(hint) in (typing_extensions.Required, typing_extensions.NotRequired):
            wrapper, hint = typing.get_origin(hint), typing.get_args(hint)[0]
        fields[key] = wrapper[_for_pydantic(hint)]
    rebuilt = typing_extensions.TypedDict(typed_dict.__name__, fields)  # type: ignore[operator]
    rebuilt.__pydantic_config__ = getattr(
        typed_dict, "__pydantic_config__", ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    )
    return rebuilt


def _describe_error(error: Any) -> str:
    where = ".".join(str(part) for part in error.get("loc", ()))
    return f"{where}: {error['msg']}" if where else str(error["msg"])
