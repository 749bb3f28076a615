"""Errors a caller can see. Each names the actor, the method and the host, and says what to do.
Each class's docstring says when it is raised and whether resending the call is safe.
"""

from __future__ import annotations

import concurrent.futures
import functools
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class CallSite:
    """Who was called: shown in every error."""

    actor: str
    method: str
    host: str

    def __str__(self) -> str:
        return f"actor {self.actor!r} method {self.method!r} on host {self.host!r}"


class ActorError(Exception):
    """Base of every runtime error."""

    def __init__(self, message: str, *, site: CallSite | None = None) -> None:
        self.site = site
        # Exception's own __init__, not the next class in the MRO: a dual RemoteError (below) must not run its
        # cause's constructor, whose parameters are unknown here.
        Exception.__init__(self, f"{site}: {message}" if site else message)


class RemoteError(ActorError):
    """The remote method raised. ``remote_type`` and ``remote_traceback`` describe the original exception; whether
    to retry is the application's call."""

    def __init__(
        self, message: str, *, site: CallSite | None = None, remote_type: str = "", remote_traceback: str = ""
    ) -> None:
        self.remote_type = remote_type
        self.remote_traceback = remote_traceback
        self.remote_message = message
        super().__init__(f"raised {remote_type}: {message}", site=site)

    def __str__(self) -> str:
        base = Exception.__str__(self)  # not the cause's (KeyError's would quote it)
        return f"{base}\n--- remote traceback ---\n{self.remote_traceback}" if self.remote_traceback else base


class ActorDied(ActorError):
    """The actor's process is gone (exit seen, or unreachable), or is leaving (exit_actor, SystemExit) and said so
    first; calls in flight will never complete. Not safe to resend blindly."""


class ActorRestarted(ActorError):
    """The actor answered with a new boot id: it restarted and calls in flight were lost. Also a call through a
    handle pinned to an incarnation that is gone: it never ran (``ActorHandle.follow_restart`` moves the handle on).
    Resubmit to the new incarnation."""


class DeadlineExceeded(ActorError, TimeoutError):
    """The deadline passed before a result arrived. The call may still run on the actor: a retry is a new call
    (a new call id)."""


class NotDelivered(ActorError):
    """The call never reached the actor (e.g. unknown to it after a reconnect, and the deadline passed); resending
    it is safe."""


class OverCapacity(ActorError):
    """The actor refused the call because a budget (call store, memory) is full; retry later or raise the budget."""


class CallRejected(ActorError):
    """The actor refused the call: unknown method, wrong arguments, or a call id reused for another request. Resending
    the same call fails the same way."""


class CallCancelled(ActorError, concurrent.futures.CancelledError):
    """The call was cancelled by its caller before it finished (``PendingCall.cancel``)."""


class ActorNotFound(ActorError, KeyError, ValueError):
    """No live actor has that name (``get_actor``): a KeyError, and a ValueError as Ray's ``get_actor`` raises."""

    def __str__(self) -> str:  # KeyError's own would show the message quoted
        return Exception.__str__(self)


class ActorDefinitionError(TypeError):
    """An actor class that breaks the rules (e.g. a positional constructor parameter)."""


#: Wire codes for errors the server reports without running user code (see the classes above).
ERROR_CODES: dict[str, type[ActorError]] = {
    "remote": RemoteError,
    "over_capacity": OverCapacity,
    "rejected": CallRejected,
    "deadline": DeadlineExceeded,
    "restarted": ActorRestarted,
    "exited": ActorDied,  # the actor process is leaving (exit_actor, SystemExit, shutdown); the call never finishes
    "cancelled": CallCancelled,
}

_MAX_TYPE_NAME = 300
#: Never raised as their own class: runtime errors (a nested call's), and what Python itself gives a meaning
#: when it escapes a generator or coroutine.
_NEVER_DUAL = (ActorError, StopIteration, StopAsyncIteration)


def remote_error(message: str, *, site: CallSite | None, remote_type: str, remote_traceback: str) -> RemoteError:
    """The RemoteError for a remote exception: of a class deriving from RemoteError and the remote exception's own
    class when that class is loaded in this process, else a plain RemoteError.

    This is Ray's dual-class approach (``RayTaskError.as_instanceof_cause``): ``except ValueError`` catches a remote
    ValueError, which still carries ``remote_traceback``, ``remote_type`` and ``site``. Only classes already loaded
    here are used (a name from the network never makes this process import anything); runtime errors of a nested
    call (a remote ActorDied) stay plain RemoteErrors, so they are never taken for this call's own fate."""
    cause = loaded_exception_type(remote_type)
    cls = dual_class(cause) if cause is not None else None
    if cls is not None:
        try:
            error = cls.__new__(cls, message)
            RemoteError.__init__(error, message, site=site, remote_type=remote_type, remote_traceback=remote_traceback)
            return error
        except Exception:  # an exotic __new__: the plain class still says everything
            pass
    return RemoteError(message, site=site, remote_type=remote_type, remote_traceback=remote_traceback)


def loaded_exception_type(name: str) -> type[Exception] | None:
    """The Exception subclass named ``module.Qualified.Name`` if its module is already imported here (never imports,
    never runs a module ``__getattr__``); None otherwise, and for runtime errors."""
    if not isinstance(name, str) or not 0 < len(name) <= _MAX_TYPE_NAME or "<" in name:
        return None
    parts = name.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:split]))
        if module is None:
            continue
        target: object = module
        for part in parts[split:]:
            target = vars(target).get(part) if hasattr(target, "__dict__") else None
        if isinstance(target, type) and issubclass(target, Exception) and not issubclass(target, _NEVER_DUAL):
            return target
        return None
    return None


@functools.lru_cache(maxsize=256)
def dual_class(cause: type[Exception]) -> type[RemoteError] | None:
    """``RemoteError[cause]``: a RemoteError that is also a ``cause``; None when Python cannot combine them."""
    try:
        return type(f"RemoteError[{cause.__qualname__}]", (RemoteError, cause), {"__module__": __name__})
    except TypeError:  # e.g. a layout conflict, or a class marked final
        return None
