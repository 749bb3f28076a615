"""What makes an actor method a stream: a generator function (sync or async), its items' type, its wire name
(run by :mod:`runtime.actor.stream_runner` on the actor, taken by :mod:`runtime.caller.stream_call` on the caller)."""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any

from runtime.core.errors import ActorDefinitionError, CallRejected

#: On the wire a streaming call is named ``method~stream`` (``method@group~stream``): the actor refuses a plain call of
#: a generator method (its caller would wait for a result that never comes) and a streaming call of an ordinary one,
#: and a plain call pays nothing for the difference.
STREAM_MARK = "~stream"

_ITERATORS = {
    collections.abc.Iterator,
    collections.abc.Iterable,
    collections.abc.Generator,
    collections.abc.AsyncIterator,
    collections.abc.AsyncIterable,
    collections.abc.AsyncGenerator,
}


def is_generator_function(where: str, function: Callable[..., Any], control_plane: bool) -> bool:
    """Whether ``function`` is a generator (or async generator) function; a control-plane one is refused: it
    would hold the actor's event loop while its caller is behind."""
    streams = inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function)
    if streams and control_plane:
        raise ActorDefinitionError(
            f"{where} is a generator marked control_plane=True: a stream runs on a concurrency group (its producer "
            "waits while the caller is behind); drop control_plane or give it a concurrency_group"
        )
    return streams


def yield_hint(hint: Any) -> Any:
    """The items' type of a generator's return annotation (``Iterator[int]`` -> int); None when it names none."""
    if typing.get_origin(hint) in _ITERATORS:
        args = typing.get_args(hint)
        return args[0] if args else None
    return None


def stream_variant(info: Any, actor: str) -> Any:
    """The :class:`runtime.core.metadata.MethodInfo` of a streaming call of ``info``'s method."""
    if not info.streams:
        raise CallRejected(
            f"actor {actor!r} method {info.name!r} is no generator method: call it plainly (its result is one value)"
        )
    return dataclasses.replace(info, stream_call=True)


def plain_call_problem(actor: str, name: str) -> str:
    return (
        f"actor {actor!r} method {name!r} is a generator method, whose items stream: call it through a handle that "
        "knows the class (the one spawn returned) or as handle.m.options(stream=True)(...)"
    )
