"""The actor that runs Ray tasks: one process of a task pool (:mod:`runtime.ray_compat.tasks`)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle

_MAX_CACHED = 256


def mac_of(secret: bytes, function: bytes) -> bytes:
    return hmac.new(secret, function, hashlib.sha256).digest()


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

    def run(self, function: bytes, mac: bytes, args: list, kwargs: dict) -> Any:
        return self._load(function, mac)(*args, **kwargs)

    def stream(self, function: bytes, mac: bytes, args: list, kwargs: dict) -> Iterator[Any]:
        yield from self._load(function, mac)(*args, **kwargs)
