"""The dashboard's collector actor: appends the records producers send to the run directory's JSONL streams.

Place it on the launcher's machine (``hosts = ["launcher"]``) so the run directory is local to ``miles-dashboard``."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from actors.dashboard.records import MAX_LINE_BYTES, STATUS_FILE, STREAMS, encode_line
from runtime import method

logger = logging.getLogger(__name__)

MAX_BATCH = 10_000  # records per call
MAX_SOURCE_LEN = 64


class DashboardCollector:
    """Owns ``run_dir``'s streams: ``append`` writes a batch; ``stats`` says what was written, refused, dropped."""

    def __init__(self, *, run_dir: str) -> None:
        """``run_dir``: created if missing; relative paths are resolved against the worker's working directory."""
        self.run_dir = Path(run_dir).expanduser().resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._written = dict.fromkeys(STREAMS, 0)
        self._refused = 0
        self._dropped: dict[str, int] = {}
        self._started = time.time()
        self._write_status()
        logger.info("dashboard collector writing to %s", self.run_dir)

    # Records arrive over the network: the stream name is checked against records.STREAMS (never a path), and a
    # record that does not encode or exceeds MAX_LINE_BYTES is refused and counted. A batch is one write of whole lines,
    # flushed, so a crash leaves at most a torn last line, which readers skip.
    def append(self, stream: str, records: list[dict[str, Any]], source: str = "", dropped: int = 0) -> int:
        """Append ``records`` to ``stream`` (``"samples"`` or ``"steps"``); returns how many were written.
        ``dropped``: records ``source`` dropped before sending since its last call (added to the counts)."""
        if stream not in STREAMS:
            raise ValueError(f"unknown dashboard stream {stream!r}; streams: {sorted(STREAMS)}")
        if len(records) > MAX_BATCH:
            raise ValueError(f"a batch holds at most {MAX_BATCH} records, got {len(records)}: send smaller batches")
        lines = []
        for record in records:
            try:
                line = encode_line(record)
            except (TypeError, ValueError) as exc:
                self._refused += 1
                logger.warning("dashboard: refused a %s record from %r: %s", stream, source, exc)
                continue
            if len(line) > MAX_LINE_BYTES:
                self._refused += 1
                logger.warning("dashboard: refused a %d-byte %s record from %r", len(line), stream, source)
                continue
            lines.append(line)
        with self._lock:
            if dropped > 0:
                key = source[:MAX_SOURCE_LEN] or "unknown"
                self._dropped[key] = self._dropped.get(key, 0) + int(dropped)
            if lines:
                handle = self._file(stream)
                handle.write(b"".join(lines))
                handle.flush()
                self._written[stream] += len(lines)
            self._write_status()
        return len(lines)

    @method(control_plane=True)
    def stats(self) -> dict[str, Any]:
        """Records written per stream, refused (did not encode or too long) and dropped per producer."""
        with self._lock:
            return self._status()

    @method(control_plane=True)
    def location(self) -> str:
        """The run directory (absolute), for ``miles-dashboard``."""
        return str(self.run_dir)

    def close(self) -> None:
        """Close the files (a later ``append`` reopens them)."""
        with self._lock:
            for handle in self._files.values():
                handle.close()
            self._files.clear()

    def _file(self, stream: str) -> Any:
        handle = self._files.get(stream)
        if handle is None:
            handle = self._files[stream] = open(self.run_dir / STREAMS[stream], "ab")
        return handle

    def _status(self) -> dict[str, Any]:
        return {"written": dict(self._written), "refused": self._refused, "dropped": dict(self._dropped),
                "started": self._started, "pid": os.getpid()}  # fmt: skip

    def _write_status(self) -> None:
        path = self.run_dir / STATUS_FILE
        temporary = path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(self._status()))
        os.replace(temporary, path)
