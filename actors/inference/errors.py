"""Errors of the inference controller; every message names the cell and the URL involved.

| error              | what happened                                                | what to do                     |
| ------------------ | ------------------------------------------------------------ | ------------------------------ |
| EngineStartError   | an engine exited, or was not ready by its deadline           | read the log tail it quotes    |
| EngineRequestError | an engine refused, or did not answer a control request       | a dead engine is restarted     |
| UpdateInProgress   | start_update_weights timed out: another update holds the lock | end/abort that update first   |
| UpdateNotHeld      | end/abort/push with a token that does not hold the lock      | call start_update_weights      |
| NoServingEngines   | no engine can take the request (all failed, or pending)      | see cells() for each error     |
| MemoryReleased     | generation or an update while the engines' memory is released | call resume_memory() first    |
"""

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
