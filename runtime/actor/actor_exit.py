"""Leaving an actor process: ``exit_actor()`` on purpose, or a method that raises SystemExit or another
BaseException; either way at once and cleanly, as Ray's ``exit_actor``, with an exit code the restart policy reads."""

from __future__ import annotations

from typing import NoReturn

_KEYBOARD_INTERRUPT_CODE = 130

_serving: str | None = None  # the actor this process serves, once constructed (runtime.actor.actor_server)


class ActorExit(SystemExit):
    """Raised by :func:`exit_actor`; leaves the actor with exit code 0, so it is not restarted."""

    def __init__(self) -> None:
        super().__init__(0)


def exit_actor() -> NoReturn:
    """Leave this actor on purpose, from a sync or an async method: the process exits with code 0 once it has
    answered every call in flight and queued (the caller of this method, too, gets ActorDied, wire code ``exited``;
    later calls are refused the same way); the spawner does not restart it. Raises TypeError outside an actor.

    The process ends with ``os._exit``: threads still inside user code are not waited for, and ``atexit`` handlers
    do not run (put cleanup in the method that calls ``exit_actor()``)."""
    if _serving is None:
        raise TypeError("exit_actor() was called outside an actor; call it inside an actor's method")
    raise ActorExit()


def mark_serving(name: str) -> None:
    """This process now serves actor ``name`` (exit_actor() is allowed from here on)."""
    global _serving
    _serving = name


def exit_code_of(exc: BaseException) -> int:
    """The exit code a process leaving because of ``exc`` ends with: SystemExit(n) gives ``n`` (None: 0; not an
    int: 1), KeyboardInterrupt 130 (128 + SIGINT), any other BaseException 1. The supervisor restarts (under
    max_restarts) every non-zero code, so ``exit_actor()`` (0) is never restarted."""
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return (code & 0xFF) or (1 if code else 0)  # sys.exit(256) must not read as a clean exit
        return 1
    if isinstance(exc, KeyboardInterrupt):
        return _KEYBOARD_INTERRUPT_CODE
    return 1


def describe(exc: BaseException, method: str) -> str:
    """Why the process leaves, for the ActorDied its callers see."""
    if isinstance(exc, ActorExit):
        return f"method {method!r} called exit_actor()"
    return f"method {method!r} raised {type(exc).__name__}({', '.join(map(repr, exc.args))})"
