"""SGLang's ``model_update_lock`` (``srt/utils/aio_rwlock.py``): generation holds it as readers, a weight update
that runs while generation is not paused takes it as the writer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from runtime import within


class UpdateLockTimeout(TimeoutError):
    """A reader or the writer did not get the lock within its deadline."""


class ModelUpdateLock:
    """A readers-writer lock for one event loop; every wait has a deadline (:class:`UpdateLockTimeout`).

    The writer waits until every reader is gone; while a writer waits or holds it, new readers wait (writer
    preference), so an update is never starved by a stream of new requests.
    """

    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self._readers = 0
        self._writer_active = False
        self._waiting_writers = 0

    @property
    def readers(self) -> int:
        return self._readers

    @asynccontextmanager
    async def reader(self, timeout_s: float) -> AsyncIterator[None]:
        async with self._cond:
            await self._wait(lambda: not (self._writer_active or self._waiting_writers), timeout_s, "generation")
            self._readers += 1
        try:
            yield
        finally:
            async with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @asynccontextmanager
    async def writer(self, timeout_s: float) -> AsyncIterator[None]:
        async with self._cond:
            self._waiting_writers += 1
            try:
                await self._wait(lambda: not (self._writer_active or self._readers), timeout_s, "a weight update")
                self._writer_active = True
            finally:
                self._waiting_writers -= 1
                self._cond.notify_all()
        try:
            yield
        finally:
            async with self._cond:
                self._writer_active = False
                self._cond.notify_all()

    async def _wait(self, ready: object, timeout_s: float, who: str) -> None:
        try:
            await within(self._cond.wait_for(ready), timeout_s)  # type: ignore[arg-type]
        except TimeoutError as exc:
            raise UpdateLockTimeout(
                f"{who} waited {timeout_s}s for the model update lock "
                f"({self._readers} request(s) running, writer active: {self._writer_active})"
            ) from exc
