"""``ray.exceptions`` names (Ray's python/ray/exceptions.py), and how this runtime's errors become them
(:func:`as_ray_error`)."""

from __future__ import annotations

import concurrent.futures
import functools

from runtime.core import errors


class RayError(Exception):
    """Every error of this module."""


class RayTaskError(RayError):
    """A task or actor method raised; ``cause`` is the remote error (with its traceback)."""

    cause: BaseException | None = None

    def as_instanceof_cause(self) -> RayTaskError:
        return self


class RayActorError(RayError):
    """The actor died, or is unreachable, before or while running the call; ``actor_id`` names it when known."""

    actor_id: str | None = None


class ActorDiedError(RayActorError):
    """The actor's process is gone (killed, exited, crashed)."""


class ActorUnavailableError(RayActorError):
    """The actor is restarting (its call may or may not have run)."""


class GetTimeoutError(RayError, TimeoutError):
    """``ray.get(..., timeout=)`` passed its timeout."""


class TaskCancelledError(RayError, concurrent.futures.CancelledError):
    """The call was cancelled (``ray.cancel``)."""


class WorkerCrashedError(RayError):
    """The worker process running a task died (Ray raises it for a task whose retries are used up)."""


class ObjectLostError(RayError):
    """The value of an object ref is gone (its owner died or it was freed)."""


class RaySystemError(RayError):
    """A call refused by the runtime (bad arguments, over capacity, not delivered)."""


@functools.lru_cache(maxsize=256)
def _task_error_class(cause: type[errors.RemoteError]) -> type[RayTaskError]:
    try:
        name = cause.__qualname__.removeprefix("RemoteError[").removesuffix("]").rsplit(".", 1)[-1]  # as Ray: A(B)
        return type(f"RayTaskError({name})", (RayTaskError, cause), {"__module__": __name__})
    except TypeError:  # Python cannot combine them: a plain RayTaskError still names the cause
        return RayTaskError


#: The attribute a task worker sets on an exception whose class has no importable name (defined in a function, or
#: in ``__main__``): the class itself, carried by value, so the caller's error is an instance of it, as in Ray.
CAUSE_CLASS = "ray_compat_cause_class"


def _with_cause_class(exc: errors.RemoteError) -> type[errors.RemoteError]:
    carried = vars(exc).get(CAUSE_CLASS)
    if type(exc) is errors.RemoteError and isinstance(carried, type) and issubclass(carried, Exception):
        return errors.dual_class(carried) or errors.RemoteError
    return type(exc)


def as_ray_error(exc: BaseException) -> BaseException:
    """The ``ray.exceptions`` error for an error of this runtime (others are returned as they are).

    Ray's ``RayTaskError.as_instanceof_cause`` derives from RayTaskError and the cause's class; here the error is
    of a class deriving from RayTaskError and this runtime's ``RemoteError[ValueError]`` (itself a ValueError), so
    ``except ValueError``, ``except RayTaskError`` and ``except RemoteError`` all catch it. ActorDiedError is a
    RayActorError, as in Ray; GetTimeoutError a TimeoutError; TaskCancelledError a CancelledError."""
    if isinstance(exc, RayError):
        return exc
    if isinstance(exc, errors.RemoteError):
        cls = _task_error_class(_with_cause_class(exc))
        error = cls.__new__(cls, str(exc))
        error.__dict__.update(exc.__dict__)
        error.__dict__.pop(CAUSE_CLASS, None)
        error.args = exc.args
        error.cause = exc
        return error
    for ours, theirs in _MAPPED:
        if isinstance(exc, ours):
            error = theirs(str(exc))
            error.__cause__ = exc
            return error
    return exc


def actor_died(exc: errors.ActorDied, actor_id: str) -> ActorDiedError:
    """The ActorDiedError of a call to actor ``actor_id``, saying why as Ray does (python/ray/exceptions.py), then
    this runtime's account (which names the exit code or signal)."""
    text = str(exc)
    if "killed by its owner" in text:
        why = "The actor is dead because it was killed by `ray.kill`."
    elif "exit_actor" in text or "exited with code 0" in text:  # a clean exit is an intended one (actor_exit)
        why = "The actor is dead because it exited on purpose: User requested to exit the actor (exit_actor())."
    else:
        why = "The actor is dead because its worker process has died."
    error = ActorDiedError(f"{why} {text}")
    error.actor_id = actor_id
    error.__cause__ = exc
    return error


def worker_crashed(exc: BaseException) -> BaseException:
    """A task's failure as Ray reports it: its worker process died (retries used up) is WorkerCrashedError."""
    if not isinstance(exc, errors.ActorDied):
        return exc
    error = WorkerCrashedError(f"The worker died unexpectedly while executing this task. {exc}")
    error.__cause__ = exc
    return error


_MAPPED: tuple[tuple[type[BaseException], type[RayError]], ...] = (
    (errors.ActorDied, ActorDiedError),
    (errors.ActorRestarted, ActorUnavailableError),
    (errors.ActorNotFound, RayActorError),
    (errors.CallCancelled, TaskCancelledError),
    (concurrent.futures.CancelledError, TaskCancelledError),
    (errors.DeadlineExceeded, GetTimeoutError),
    (errors.NotDelivered, RayActorError),
    (errors.CallRejected, RaySystemError),
    (errors.OverCapacity, RaySystemError),
)

__all__ = [
    "ActorDiedError",
    "ActorUnavailableError",
    "GetTimeoutError",
    "ObjectLostError",
    "RayActorError",
    "RayError",
    "RaySystemError",
    "RayTaskError",
    "TaskCancelledError",
    "WorkerCrashedError",
    "actor_died",
    "as_ray_error",
    "worker_crashed",
]
