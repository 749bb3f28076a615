"""Acknowledgements of received results, sent in batches: each tells the actor it may free a result.

They ride on the next SUBMIT (:meth:`AckBatch.take`); when none comes within ``ACK_DELAY_S``, a timer on the loop
sends them alone, and so does every heartbeat. An id is added by whichever thread read the result.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

ACK_DELAY_S = 0.02


class AckBatch:
    """The ids acknowledged since the last send. ``send_alone(ids)`` sends them in an ACK of their own."""

    def __init__(self, *, on_loop_thread: Callable[[], bool], send_alone: Callable[[list[bytes]], None]) -> None:
        self._on_loop_thread = on_loop_thread
        self._send_alone = send_alone
        self._lock = threading.Lock()
        self._ids: list[bytes] = []

    def take(self) -> list[bytes]:
        """The ids to send now (for a SUBMIT to carry); the batch starts again empty."""
        with self._lock:
            ids, self._ids = self._ids, []
        return ids

    def add(self, call_id: bytes) -> None:
        with self._lock:
            if not self._ids and self._on_loop_thread():
                asyncio.get_running_loop().call_later(ACK_DELAY_S, self.flush)
            self._ids.append(call_id)  # added by another thread: the next SUBMIT or heartbeat carries it

    def flush(self) -> None:
        """Send what no SUBMIT has carried yet."""
        ids = self.take()
        if ids:
            self._send_alone(ids)
