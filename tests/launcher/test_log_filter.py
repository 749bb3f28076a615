"""What reaches the launcher's console from a worker stream (launcher.log_filter), on lines as their sources write
them: Python logging with the worker's format (runtime/worker.py), uvicorn's access log (SGLang's HTTP server),
SGLang's own ``[timestamp TP0] message`` format (sglang/srt/utils/common.py configure_logger) and sglang-router's
tracing lines."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest

from launcher.log_filter import ConsoleLogFilter, record_level
from tests.actors.conftest import free_port


def _python_record(level: int, message: str) -> str:
    formatter = logging.Formatter("%(asctime)s %(levelname)s pid=7 %(name)s: %(message)s")
    return formatter.format(logging.LogRecord("actors.x", level, __file__, 1, message, None, None))


@pytest.mark.parametrize(
    ("line", "level"),
    [
        (_python_record(logging.INFO, "constructed actor"), "INFO"),
        (_python_record(logging.WARNING, "ERROR in the text does not matter"), "WARNING"),
        (_python_record(logging.ERROR, "failed"), "ERROR"),
        ('INFO:     127.0.0.1:40000 - "POST /generate HTTP/1.1" 200 OK', "INFO"),
        ("[2026-12-03 09:54:21 TP0] Prefill batch. #new-seq: 1", "INFO"),
        ('  File "x.py", line 1, in <module>', None),
        ("a print from actor code", None),
    ],
)
def test_record_levels(line: str, level: str | None) -> None:
    assert record_level(line) == level


def test_warnings_mode_keeps_a_record_together() -> None:
    console = ConsoleLogFilter("warnings", ready_prefix="MILES_ACTOR_READY")
    lines = [
        ("plain output before any record", True),
        (_python_record(logging.INFO, "info"), False),
        ("second line of the info record", False),
        (_python_record(logging.ERROR, "boom"), True),
        ("Traceback (most recent call last):", True),
        ("ValueError: bad", True),
        ('MILES_ACTOR_READY {"endpoint": "tcp://127.0.0.1:1"}', False),
        (_python_record(logging.DEBUG, "debug"), False),
    ]
    assert [console.shows(line) for line, _ in lines] == [shown for _, shown in lines]


def test_all_and_none_modes_and_a_bad_mode() -> None:
    line = _python_record(logging.INFO, "info")
    assert ConsoleLogFilter("all").shows(line) and ConsoleLogFilter("all").shows("MILES_ACTOR_READY {}")
    assert not ConsoleLogFilter("none").shows(_python_record(logging.ERROR, "boom"))
    with pytest.raises(ValueError, match="stream_logs must be one of"):
        ConsoleLogFilter("some")


def test_real_sglang_router_lines_are_info_records() -> None:
    """sglang-router 0.3.2 writes coloured tracing lines even into a pipe; each must parse as an INFO record."""
    argv = [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(free_port())]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any("Workers initialized" in line for line in lines):
            line = proc.stdout.readline() if proc.stdout else ""
            if not line:
                break
            lines.append(line.rstrip("\n"))
    finally:
        proc.kill()
        proc.wait(timeout=10)
    records = [line for line in lines if "\x1b" in line]
    assert records and any("Workers initialized" in line for line in records), lines
    assert {record_level(line) for line in records} == {"INFO"}, records
    assert not any(ConsoleLogFilter("warnings").shows(line) for line in records)
