"""The guard around every method of a trainer rank: one at a time, and an unexpected failure breaks it for good.

It holds what :meth:`~actors.trainer.trainer.Trainer.health` reports about the rank's methods: what is running
now, why the trainer is broken (if it is) and whether it was closed. Those fields are read from any thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from actors.trainer.errors import BatchRejected, TrainerError, TrainerFailed

logger = logging.getLogger(__name__)


class RunGuard:
    """Runs a rank's methods one at a time; a failure outside the known-safe errors marks the rank broken."""

    def __init__(self, rank: int, collective_timeout_s: float) -> None:
        self.rank = rank
        self.collective_timeout_s = collective_timeout_s
        self.current: str | None = None  # the method running now
        self.failed: str | None = None
        self.closed = False
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def running(self, what: str) -> Iterator[None]:
        """Mark ``what`` as running; a failure outside the known-safe errors breaks the trainer for good."""
        if self.closed:
            raise TrainerError(f"rank {self.rank}: {what} called after close()")
        if self.failed is not None:
            raise TrainerFailed(f"rank {self.rank}: trainer is broken since: {self.failed}")
        with self._lock:
            self.current = what
            try:
                yield
            except (BatchRejected, TrainerError):
                raise
            except Exception as exc:
                self.failed = f"{what}: {type(exc).__name__}: {exc}"
                logger.error("rank %d: %s failed; trainer is broken", self.rank, what)
                raise TrainerFailed(
                    f"rank {self.rank}: {what} failed ({type(exc).__name__}: {exc}); a peer may have "
                    f"died or hung (collective timeout {self.collective_timeout_s}s). Restart the "
                    "trainer group, from a checkpoint."
                ) from exc
            finally:
                self.current = None
