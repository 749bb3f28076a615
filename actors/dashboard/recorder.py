"""The producer's side of the dashboard: ``record`` never blocks; a thread of its own sends batches to the collector.

So a slow, dead or absent collector never holds up generation or training."""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import Any

from runtime import ActorHandle, get_actor

logger = logging.getLogger(__name__)

ENV_VAR = "MILES_DASHBOARD"
BATCH = 512
LOOKUP_RETRY_S = 5.0


class DashboardRecorder:
    """A bounded, fire-and-forget queue of records for the collector named ``collector_name``."""

    def __init__(
        self, collector_name: str | None, *, source: str, max_queued: int = 20_000, send_timeout_s: float = 10.0
    ) -> None:
        self.collector_name = collector_name or os.environ.get(ENV_VAR) or None
        self.source = source
        self.send_timeout_s = send_timeout_s
        self.dropped = 0
        self.sent = 0
        self._unreported = 0
        self._queue: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue(maxsize=max_queued)
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._handle: ActorHandle | None = None
        self._next_lookup = 0.0

    @property
    def enabled(self) -> bool:
        return self.collector_name is not None

    def record(self, stream: str, record: dict[str, Any]) -> None:
        """Queue ``record`` for ``stream``; drops it (counted) if the queue is full. Never blocks."""
        if not self.enabled:
            return
        self._start()
        try:
            self._idle.clear()
            self._queue.put_nowait((stream, record))
        except queue.Full:
            self._count_drops(1)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait up to ``timeout_s`` until everything queued was sent or dropped; True if so."""
        if not self.enabled or self._thread is None:
            return True
        return self._idle.wait(timeout_s)

    def _start(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="dashboard-recorder", daemon=True)
                    self._thread.start()

    # Past max_queued waiting records new ones are dropped and counted, as is a batch the collector does not take;
    # the count travels with the next batch so the collector's collector.json shows it.
    def _count_drops(self, count: int) -> None:
        with self._lock:
            self.dropped += count
            self._unreported += count

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            for stream in dict.fromkeys(s for s, _ in batch):
                self._send(stream, [record for s, record in batch if s == stream])
            if self._queue.empty():
                self._idle.set()

    def _send(self, stream: str, records: list[dict[str, Any]]) -> None:
        handle = self._collector()
        if handle is None:
            self._count_drops(len(records))
            return
        with self._lock:
            unreported, self._unreported = self._unreported, 0
        try:
            handle.append(stream, records, self.source, unreported).result(timeout=self.send_timeout_s)
            self.sent += len(records)
        except Exception as exc:  # a dashboard problem is never the run's problem: count, log, go on
            self._count_drops(len(records))
            with self._lock:
                self._unreported += unreported
            logger.warning("dashboard: %d %s records from %s dropped: %s", len(records), stream, self.source, exc)
            self._handle = None

    def _collector(self) -> ActorHandle | None:
        if self._handle is not None or time.monotonic() < self._next_lookup:
            return self._handle
        assert self.collector_name is not None
        try:
            self._handle = get_actor(self.collector_name)
        except Exception as exc:
            self._next_lookup = time.monotonic() + LOOKUP_RETRY_S
            logger.warning("dashboard: no collector %r (%s); records are dropped", self.collector_name, exc)
        return self._handle
