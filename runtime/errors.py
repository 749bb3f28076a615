"""Errors a caller can see. Each names the actor, the method and the host, and says what to do.

| error              | when                                                        | retry safe? |
|--------------------|-------------------------------------------------------------|-------------|
| RemoteError        | the method raised; carries the remote type and traceback    | app decides |
| ActorDied          | the actor's process is gone (exit seen, or unreachable), or | no          |
|                    | is leaving (exit_actor, SystemExit) and said so first       |             |
| ActorRestarted     | a new incarnation (boot id) answered; in-flight calls lost  | resubmit    |
| DeadlineExceeded   | the call's deadline passed before a result arrived          | new call id |
| NotDelivered       | the call never reached the actor (e.g. unknown after reconnect and deadline passed) | yes |
| OverCapacity       | the actor refused the call: call store or memory budget full | yes, later |
| CallRejected       | the actor refused the call: unknown method, bad arguments   | no          |
"""

from __future__ import annotations

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
        super().__init__(f"{site}: {message}" if site else message)


class RemoteError(ActorError):
    """The remote method raised. ``remote_type`` and ``remote_traceback`` describe the original exception."""

    def __init__(
        self, message: str, *, site: CallSite | None = None, remote_type: str = "", remote_traceback: str = ""
    ) -> None:
        self.remote_type = remote_type
        self.remote_traceback = remote_traceback
        self.remote_message = message
        super().__init__(f"raised {remote_type}: {message}", site=site)

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base}\n--- remote traceback ---\n{self.remote_traceback}" if self.remote_traceback else base


class ActorDied(ActorError):
    """The actor's process is gone; calls in flight will never complete."""


class ActorRestarted(ActorError):
    """The actor answered with a new boot id: it restarted and calls in flight were lost."""


class DeadlineExceeded(ActorError, TimeoutError):
    """The deadline passed before a result arrived. The call may still run on the actor."""


class NotDelivered(ActorError):
    """The call never reached the actor; resending it is safe."""


class OverCapacity(ActorError):
    """The actor refused the call because a budget is full; retry later or raise the budget."""


class CallRejected(ActorError):
    """The actor refused the call: unknown method, wrong arguments, or a call id reused for another request."""


class ActorDefinitionError(TypeError):
    """An actor class that breaks the rules (e.g. a positional constructor parameter)."""


#: Wire codes for errors the server reports without running user code (see the table above).
ERROR_CODES: dict[str, type[ActorError]] = {
    "remote": RemoteError,
    "over_capacity": OverCapacity,
    "rejected": CallRejected,
    "deadline": DeadlineExceeded,
    "restarted": ActorRestarted,
    "exited": ActorDied,  # the actor process is leaving (exit_actor, SystemExit, shutdown); the call never finishes
}
