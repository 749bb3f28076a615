"""``ray.actor``: ``exit_actor`` and the handle classes."""

from __future__ import annotations

import atexit
from typing import NoReturn

from runtime.actor.actor_exit import exit_actor as _leave
from runtime.ray_compat import task_interrupt
from runtime.ray_compat.actors import ActorClass
from runtime.ray_compat.handles import ActorHandle, ActorMethod

_NOT_AN_ACTOR = "exit_actor API is called on a non-actor worker"  # Ray's words (python/ray/actor.py)


def exit_actor() -> NoReturn:
    """Ray's ``exit_actor``: the actor leaves once this call is answered (ActorDiedError for it and later calls),
    is not restarted, and its ``atexit`` handlers run first, as in Ray. TypeError outside an actor, and in a task
    (a task worker is no actor of the user's)."""
    if task_interrupt.in_task():
        raise TypeError(f"{_NOT_AN_ACTOR}: exit_actor() was called in a task; return from the task instead")
    try:
        _leave()
    except TypeError:
        raise TypeError(f"{_NOT_AN_ACTOR}: call it inside an actor's method or constructor") from None
    except SystemExit:
        atexit._run_exitfuncs()  # the process ends with os._exit (runtime.actor.actor_exit), which runs none
        raise


__all__ = ["ActorClass", "ActorHandle", "ActorMethod", "exit_actor"]
