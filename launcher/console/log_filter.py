"""Which worker output lines reach the launcher's console (``[launcher] stream_logs``; all of them always reach the
worker's log file), so the console shows what a person must see and not every INFO line."""

from __future__ import annotations

import re
from typing import Literal

StreamLogs = Literal["warnings", "all", "none"]
STREAM_LOGS_MODES: tuple[str, ...] = ("warnings", "all", "none")

_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # sglang-router colours its lines even into a pipe
_TIMESTAMP = re.compile(r"^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")
_LEVEL = re.compile(r"\b(TRACE|DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL)\b")
_BARE_LEVEL = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s")  # uvicorn's "INFO:     127.0.0.1 ..."
_QUIET_LEVELS = frozenset({"TRACE", "DEBUG", "INFO"})
_LEVEL_WINDOW = 100  # characters after the timestamp in which a record names its level
# Warnings that are expected and say nothing a user can act on also stay in the log file: sglang-router tries to load a
# tokenizer from each worker's model_path (from the hub unless a local directory), and the CPU engine's built-in model
# with random weights reports random-init(seed=N), which has no tokenizer anywhere.
# sglang-router 0.3.2 src/core/steps/worker/local/register_tokenizer.rs; the model path is
# actors/cpu_engine/model_source.py load_builtin_model's, for random weights
_EXPECTED_WARNINGS = (re.compile(r"Failed to load tokenizer for model .+ from random-init\(seed=-?\d+\): "),)


class ConsoleLogFilter:
    """Decides, line by line, what one worker stream shows on the console; keeps the state of the current record.

    Modes: ``"warnings"`` (default): a worker's log records below WARNING stay in its log file, and so does the
    internal ``MILES_ACTOR_READY`` line; warnings, errors, tracebacks and anything the worker prints that is not a
    log record (a ``print`` in actor code, a crash message) reach the console. ``"all"``: every line
    (``miles-launch -v``). ``"none"``: nothing (``miles-launch --no-logs``). Lines that follow a record without a
    timestamp of their own (a traceback, a multi-line message) belong to it."""

    def __init__(self, mode: str, *, ready_prefix: str | None = None) -> None:
        if mode not in STREAM_LOGS_MODES:
            raise ValueError(f"stream_logs must be one of {list(STREAM_LOGS_MODES)}, not {mode!r}")
        self.mode = mode
        self.ready_prefix = ready_prefix
        self._in_quiet_record = False

    def shows(self, line: str) -> bool:
        """True if ``line`` goes to the console."""
        if self.mode != "warnings":
            return self.mode == "all"
        if self.ready_prefix and line.startswith(self.ready_prefix):
            return False
        line = _ANSI.sub("", line) if "\x1b" in line else line
        level = record_level(line)
        if level is not None:
            self._in_quiet_record = level in _QUIET_LEVELS or any(p.search(line) for p in _EXPECTED_WARNINGS)
        return not self._in_quiet_record


def record_level(line: str) -> str | None:
    """The level of a log record starting on ``line`` ("INFO" for a timestamped line naming none, SGLang's own
    format); None when the line does not start a record.

    A record is a timestamp at the start of the line followed, within a few words, by a level name, as Python's
    logging, uvicorn, aiohttp and sglang-router (in colour) write them."""
    line = _ANSI.sub("", line) if "\x1b" in line else line
    bare = _BARE_LEVEL.match(line)
    if bare:
        return bare.group(1)
    stamp = _TIMESTAMP.match(line)
    if stamp is None:
        return None
    level = _LEVEL.search(line, stamp.end(), stamp.end() + _LEVEL_WINDOW)
    if level is None:
        return "INFO"
    return "WARNING" if level.group(1) == "WARN" else level.group(1)
