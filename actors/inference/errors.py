"""Errors of the inference controller; every message names the cell and the URL involved."""

from __future__ import annotations


class InferenceError(RuntimeError):
    """Base class of the inference controller's errors."""


class EngineStartError(InferenceError):
    """An engine process did not become ready."""


class EngineRequestError(InferenceError):
    """A control request to an engine failed; ``status`` is the HTTP status, None when there was no answer."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class UpdateInProgress(InferenceError):
    """Another weight update holds the lock."""


class UpdateNotHeld(InferenceError):
    """The caller does not hold the weight-update lock."""


class NoServingEngines(InferenceError):
    """No engine is in a state that can take the request."""


class MemoryReleased(InferenceError):
    """The engines' memory is released (colocated training): no generation, no weight update into it."""
