"""Leaving an actor process: ``exit_actor()`` on purpose, or a method that raises SystemExit or another
BaseException (KeyboardInterrupt, GeneratorExit, ...).

Either way the process leaves cleanly and at once, as with Ray's ``exit_actor``: calls in flight and queued
are answered with ActorDied (wire code ``exited``) before it goes, later calls are refused the same way, and
it exits with a code the spawner's restart policy reads (:mod:`runtime.processes.supervisor`):

| how it leaves                      | exit code                      | restarted under max_restarts? |
|------------------------------------|--------------------------------|-------------------------------|
| ``exit_actor()``                   | 0                              | no (a clean exit)             |
| ``raise SystemExit(n)``/``sys.exit``| ``n`` (None: 0; not an int: 1) | when ``n`` is not 0           |
| KeyboardInterrupt                  | 130 (128 + SIGINT)             | yes                           |
| any other BaseException            | 1                              | yes                           |

The process ends with ``os._exit``: threads still inside user code are not waited for, and ``atexit``
handlers do not run (put cleanup in the method that calls ``exit_actor()``).
"""

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
    answered every call in flight (the caller of this method, too, gets ActorDied); the spawner does not
    restart it. Raises TypeError outside an actor process."""
    if _serving is None:
        raise TypeError("exit_actor() was called outside an actor; call it inside an actor's method")
    raise ActorExit()


def mark_serving(name: str) -> None:
    """This process now serves actor ``name`` (exit_actor() is allowed from here on)."""
    global _serving
    _serving = name


def exit_code_of(exc: BaseException) -> int:
    """The exit code a process leaving because of ``exc`` ends with (see the table above)."""
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
