"""Errors of the inference controller; every message names the cell and the URL involved."""

from __future__ import annotations


class InferenceError(RuntimeError):
    """Base class of the inference controller's errors."""


class EngineStartError(InferenceError):
    """An engine exited, or was not ready by its deadline: read the log tail the message quotes."""


class EngineRequestError(InferenceError):
    """An engine refused or did not answer a control request (a dead engine is restarted); ``status`` is the HTTP
    status, None when there was no answer."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class UpdateInProgress(InferenceError):
    """``start_update_weights`` timed out: another update holds the lock; end or abort that update first."""


class UpdateNotHeld(InferenceError):
    """End, abort or push with a token that does not hold the update lock: call ``start_update_weights``."""


class NoServingEngines(InferenceError):
    """No engine can take the request (all failed, or pending weights): ``cells()`` shows each one's error."""


class MemoryReleased(InferenceError):
    """The engines' memory is released (colocated training): no generation, no weight update into it; call
    ``resume_memory()`` first."""
