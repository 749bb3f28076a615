"""The host agent's event stream: JSON-line events (``agent_protocol``) written to its stdout, one at a time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, BinaryIO

from launcher.agent import agent_protocol as proto


class EventWriter:
    """Serialized JSON-line writer on the agent's stdout; a broken pipe means the launcher is gone."""

    def __init__(self, stream: BinaryIO, on_broken: Callable[[str], None]) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._on_broken = on_broken

    def emit(self, ev: str, **fields: Any) -> None:
        """Write one event (its fields and ``ev``); called from any of the agent's threads."""
        data = proto.encode({"ev": ev, **fields})
        with self._lock:
            try:
                self._stream.write(data)
                self._stream.flush()
            except (OSError, ValueError):
                self._on_broken("stdout closed")
