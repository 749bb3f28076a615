"""The actor that runs Ray tasks: one process of a task pool (:mod:`runtime.ray_compat.tasks`)."""

from __future__ import annotations

import hashlib
import hmac
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle

from runtime.core.metadata import method
from runtime.ray_compat import task_interrupt
from runtime.ray_compat.exceptions import CAUSE_CLASS

_MAX_CACHED = 256
_TOKEN_BYTES = 16  # TaskPool's tokens (os.urandom): a peer cannot guess one to interrupt a task


def mac_of(secret: bytes, function: bytes) -> bytes:
    return hmac.new(secret, function, hashlib.sha256).digest()


def _by_name(cls: type) -> bool:
    """Whether ``cls`` is what its module and qualified name lead to (so its name finds it in the caller)."""
    if cls.__module__ == "__main__":
        return False
    target: Any = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        target = getattr(target, part, None)
    return target is cls


class TaskCancelled(Exception):
    """The task was interrupted by ``ray.cancel`` while it ran and let the KeyboardInterrupt out."""


class TaskWorker:
    """Runs the functions its pool sends (each with the pool's MAC).

    A task's function travels cloudpickled with each call, so it is unpickled only when it carries the MAC made
    with the pool's secret, which only the pool's owner holds (it reached this process in the constructor, a
    control call only the spawner can make): a peer that can reach this actor cannot make it unpickle anything."""

    def __init__(self, *, secret: bytes) -> None:
        if not isinstance(secret, bytes) or len(secret) < 16:
            raise ValueError("a task worker needs its pool's secret (16 bytes or more)")
        self._secret = secret
        self._functions: dict[bytes, Callable[..., Any]] = {}

    def _load(self, function: bytes, mac: bytes) -> Callable[..., Any]:
        if not hmac.compare_digest(mac_of(self._secret, function), mac):
            raise PermissionError("a task function without its pool's MAC is never unpickled")
        loaded = self._functions.get(mac)
        if loaded is None:
            if len(self._functions) >= _MAX_CACHED:
                self._functions.clear()
            loaded = self._functions[mac] = cloudpickle.loads(function)
        return loaded

    def run(self, function: bytes, mac: bytes, args: list, kwargs: dict, token: bytes = b"") -> Any:
        """Run a task; ``token`` (the pool's, unique per call) names it for :meth:`interrupt`."""
        loaded = self._load(function, mac)
        task = task_interrupt.RunningTask(token)
        try:
            try:
                task.start()
                return loaded(*args, **kwargs)
            finally:
                task.end()
        except Exception as exc:
            if not _by_name(type(exc)):
                setattr(exc, CAUSE_CLASS, type(exc))  # no name to find it by: it travels by value (sealed pickle)
            raise
        except KeyboardInterrupt:  # wherever it fired between start and end
            task.end()
            if not task.interrupted:
                raise  # not ray.cancel's: the process was interrupted
            raise TaskCancelled("the task was cancelled by ray.cancel while it ran (KeyboardInterrupt)") from None

    @method(control_plane=True)
    def interrupt(self, token: bytes, recursive: bool = True, force: bool = False) -> bool:
        """``ray.cancel`` of the task running under ``token``: KeyboardInterrupt in it, or (``force``) this worker
        ends at once, as Ray's does; its own calls are cancelled too (``recursive``). False: it does not run here
        (it finished, or never started: a queued call is cancelled by the runtime and never runs).

        A control-plane method, so it is answered while the task runs; the interrupt itself is
        :mod:`runtime.ray_compat.task_interrupt`'s."""
        if not isinstance(token, bytes) or len(token) != _TOKEN_BYTES:
            raise ValueError(f"interrupt takes the task's {_TOKEN_BYTES}-byte token, got {token!r:.40}")
        if force and task_interrupt.running(token):
            os._exit(1)  # Ray's force=True: the worker exits; the pool starts another for the next task
        return task_interrupt.interrupt(token, bool(recursive))

    def stream(self, function: bytes, mac: bytes, args: list, kwargs: dict) -> Iterator[Any]:
        yield from self._load(function, mac)(*args, **kwargs)
