"""The inference controller's weight-update lock: held by an update from start to end, by a restarted engine while
it is brought to the current weights, and by a memory release or resume, so none of them interleave."""

from __future__ import annotations

import asyncio

from runtime import within


class UpdateLock:
    """An asyncio lock whose acquire gives up after a timeout and whose release tolerates an unheld lock."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    async def acquire(self, timeout_s: float) -> bool:
        """Take the lock within ``timeout_s`` (False if it stayed held)."""
        try:
            await within(self._lock.acquire(), timeout_s, on_dropped=lambda _: self._lock.release())
            return True
        except TimeoutError:
            return False

    def release(self) -> None:
        """Give the lock back if it is held (an update dropped at shutdown may already have)."""
        if self._lock.locked():
            self._lock.release()
