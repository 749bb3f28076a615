"""The values behind this process's object refs, by key: what an owner keeps and serves (one store per process: an
actor's, or a driver's)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from typing import Any


class ObjectStore:
    """The values this process owns, by key: ``runtime.put`` keeps a value here (:mod:`runtime.objects.object_owner`)
    and the built-ins ``__object_get__`` and ``__object_free__`` (registered there) serve it to any holder of the
    ref."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._lock = threading.Lock()

    def put(self, value: Any) -> str:
        key = os.urandom(16).hex()  # unguessable: holding the ref is what grants access
        with self._lock:
            self._values[key] = value
        return key

    def put_pending(self, future: concurrent.futures.Future[Any]) -> str:
        """Keep the value ``future`` will have (a call still running, handed on before it finished, as Ray passes
        the ref a method returns): :meth:`get_async` waits for it."""
        return self.put(_Pending(future))

    async def get_async(self, key: str) -> Any:
        """The value, waiting for a pending one (its error raised, as the call raised it)."""
        value = self.get(key)
        if isinstance(value, _Pending):
            return await asyncio.wrap_future(value.future)
        return value

    def get(self, key: str) -> Any:
        with self._lock:
            if key not in self._values:
                raise KeyError(f"object {key} is not held here (freed, or never put); {len(self._values)} held")
            return self._values[key]

    def free(self, key: str) -> bool:
        with self._lock:
            return self._values.pop(key, None) is not None

    def __len__(self) -> int:
        return len(self._values)


class _Pending:
    def __init__(self, future: concurrent.futures.Future[Any]) -> None:
        self.future = future


store = ObjectStore()
