"""Reading an append-only JSONL file as it grows: complete lines only, malformed lines reported, never fatal.

The dashboard reads the collector's files while the collector is still writing them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.dashboard.records import MAX_LINE_BYTES

MAX_PROBLEMS = 100  # kept in detail; the rest are only counted
READ_CHUNK = 16 * 1024 * 1024


@dataclass
class LineProblem:
    file: str
    line: int
    reason: str


@dataclass
class JsonlTail:
    """The reading position in one JSONL file: ``JsonlTail(path).read_new()`` returns (line number, record) for the
    lines completed since the last call.

    A line that is not a JSON object, or longer than ``MAX_LINE_BYTES``, is skipped and kept in ``problems`` (file,
    line number, why) so the page can say so."""

    path: Path
    offset: int = 0
    line_number: int = 0
    problems: list[LineProblem] = field(default_factory=list)
    problem_count: int = 0
    pending_bytes: int = 0  # an incomplete last line seen at the last read (a live writer, or a torn line)

    def read_new(self) -> list[tuple[int, dict[str, Any]]]:
        """(line number, record) for each line completed since the last call (none if the file does not exist)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self.offset:  # the file shrank (replaced or truncated): read it again from its start
            self.offset = self.line_number = 0
        records: list[tuple[int, dict[str, Any]]] = []
        with self.path.open("rb") as handle:
            while self.offset < size:
                handle.seek(self.offset)
                chunk = handle.read(min(READ_CHUNK, size - self.offset))
                end = chunk.rfind(b"\n")
                if end < 0:
                    if len(chunk) > MAX_LINE_BYTES:  # one endless line: skip what there is of it
                        self._problem(self.line_number + 1, f"a line longer than {MAX_LINE_BYTES} bytes")
                        self.offset += len(chunk)
                        continue
                    # A last line without its newline is a record still being written (or torn by a crash): it is
                    # left for the next call, never parsed.
                    self.pending_bytes = len(chunk)
                    break
                for line in chunk[: end + 1].splitlines():
                    self.line_number += 1
                    record = self._parse(line)
                    if record is not None:
                        records.append((self.line_number, record))
                self.offset += end + 1
                self.pending_bytes = 0
        return records

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        if not line.strip():
            return None
        if len(line) > MAX_LINE_BYTES:
            self._problem(self.line_number, f"a line longer than {MAX_LINE_BYTES} bytes")
            return None
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            self._problem(self.line_number, f"not JSON: {exc}")
            return None
        if not isinstance(value, dict):
            self._problem(self.line_number, f"a JSON {type(value).__name__}, not an object")
            return None
        return value

    def _problem(self, line: int, reason: str) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(LineProblem(self.path.name, line, reason))
