"""The error for arguments that cannot be sent: which argument, of which actor's method, and why."""

from __future__ import annotations

from typing import Any

from transport.codec import UnsupportedTypeError, encode

#: What encoding an argument may raise: OverflowError is msgpack's for an int outside 64 bits (it has no bigger).
UNSENDABLE = (UnsupportedTypeError, OverflowError)


def argument_error(
    actor: str,
    method: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    exc: Exception,
    names: tuple[str, ...] = (),
) -> TypeError:
    named = [
        (f"argument {names[i]!r}" if i < len(names) else f"positional argument {i}", v) for i, v in enumerate(args)
    ] + [(f"argument {k!r}", v) for k, v in kwargs.items()]
    for label, value in named:
        try:
            encode(value)
        except UNSENDABLE as inner:
            return TypeError(f"{label} of actor {actor!r} method {method!r} cannot be sent: {_unsendable(inner)}")
    return TypeError(f"arguments of actor {actor!r} method {method!r} cannot be sent: {_unsendable(exc)}")


def _unsendable(exc: Exception) -> str:
    if isinstance(exc, OverflowError):
        return f"it holds an int outside the 64 bits msgpack carries (-2**63 to 2**64-1) ({exc})"
    return str(exc)
