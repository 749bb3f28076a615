"""Registered types: dataclasses, pydantic models and enums that may cross the wire by name.

Only registered types are rebuilt on decode, so a peer cannot make us import or construct arbitrary classes.
The runtime registers every type named in an actor's method hints; users register others explicitly.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T", bound=type)

_by_name: dict[str, type] = {}
_name_of: dict[type, str] = {}
_custom: dict[type, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {}


def type_name(cls: type) -> str:
    """The wire name of ``cls``: ``module:qualname``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def _is_pydantic_model(cls: type) -> bool:
    return hasattr(cls, "model_fields") and hasattr(cls, "model_validate")


def is_registrable(cls: Any) -> bool:
    """Whether ``cls`` is a kind of type the codec knows how to carry once registered."""
    return isinstance(cls, type) and (
        dataclasses.is_dataclass(cls) or issubclass(cls, enum.Enum) or _is_pydantic_model(cls)
    )


def register_type(
    cls: T, *, to_state: Callable[[Any], Any] | None = None, from_state: Callable[[Any], Any] | None = None
) -> T:
    """Allow ``cls`` on the wire; usable as a class decorator.

    Dataclasses, pydantic models and enums need nothing more. Any other class needs ``to_state`` (object →
    encodable state) and ``from_state`` (state → object).
    """
    if (to_state is None) != (from_state is None):
        raise TypeError("register_type: give both to_state and from_state, or neither")
    if to_state is not None:
        _custom[cls] = (to_state, from_state)
    elif not is_registrable(cls):
        raise TypeError(
            f"register_type({cls!r}): only dataclasses, pydantic models and enums can be registered; "
            "convert other objects to dicts, lists, numbers, strings, bytes, numpy arrays or torch tensors"
        )
    name = type_name(cls)
    known = _by_name.get(name)
    if known is not None and known is not cls:
        # A module imported twice (e.g. as __main__ and by name) gives two classes with one name: keep the newest.
        _name_of.pop(known, None)
    _by_name[name] = cls
    _name_of[cls] = name
    return cls


def registered_name(cls: type) -> str | None:
    """The wire name of ``cls`` if registered, else None."""
    return _name_of.get(cls)


def to_fields(obj: Any) -> Any:
    """The state that represents a registered object on the wire."""
    custom = _custom.get(type(obj))
    if custom is not None:
        return custom[0](obj)
    if isinstance(obj, enum.Enum):
        return obj.value
    if dataclasses.is_dataclass(obj):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
    return obj.model_dump()  # nested models become dicts: model_validate rebuilds them, no registration needed


def from_fields(name: str, state: Any) -> Any:
    """Rebuild a registered object from its wire name and state."""
    cls = _by_name.get(name)
    if cls is None:
        raise TypeError(
            f"received an object of unregistered type {name!r}; call transport.register_type on it in this "
            "process too (types named in actor method hints are registered automatically)"
        )
    custom = _custom.get(cls)
    if custom is not None:
        return custom[1](state)
    if issubclass(cls, enum.Enum):
        return cls(state)
    if dataclasses.is_dataclass(cls):
        return cls(**state)
    return cls.model_validate(state)
