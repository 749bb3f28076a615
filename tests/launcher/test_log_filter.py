"""What reaches the launcher's console from a worker stream (launcher.console.log_filter), on lines as their sources
write them: Python logging with the worker's format (runtime/worker.py), uvicorn's access log (SGLang's HTTP
server), SGLang's own ``[timestamp TP0] message`` format (sglang/srt/utils/common.py configure_logger) and
sglang-router's
tracing lines."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest

from actors.cpu_engine.model_source import load_builtin_model
from actors.model_config import ModelConfig
from launcher.console.log_filter import ConsoleLogFilter, record_level
from tests.actors.conftest import free_port


def _python_record(level: int, message: str) -> str:
    formatter = logging.Formatter("%(asctime)s %(levelname)s pid=7 %(name)s: %(message)s")
    record = logging.LogRecord("actors.x", level, __file__, 1, message, None, None)
    record.created, record.msecs = 1_780_000_000.0, 491.0  # a fixed time: test ids stay the same in every process
    return formatter.format(record)


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


@pytest.mark.processes
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


def _router_tokenizer_warning(model_path: str) -> str:
    """sglang-router 0.3.2's line (as captured from it) when it cannot load a tokenizer from a worker's model_path."""
    dim, yellow, reset = "\x1b[2m", "\x1b[33m", "\x1b[0m"
    target = "smg::core::steps::worker::local::register_tokenizer"
    return (
        f"{dim}2026-12-07 06:13:13{reset} {yellow} WARN{reset} {dim}{target}{reset}{dim}:{reset} "
        f"{dim}/home/runner/work/sglang/sglang/src/core/steps/worker/local/register_tokenizer.rs{reset}{dim}:{reset}"
        f"{dim}79:{reset} Failed to load tokenizer for model cpu-engine from {model_path}: Failed to download "
        f"tokenizer from HuggingFace: Failed to fetch model '{model_path}' from HuggingFace: request error: error "
        f"sending request for url (https://huggingface.co/api/models/{model_path}/revision/main). Is this a valid "
        "HuggingFace ID?"
    )


def test_router_tokenizer_warning_is_hidden_only_for_a_model_with_no_tokenizer() -> None:
    random_init = load_builtin_model(ModelConfig(seed=1234)).model_path  # what the CPU engine reports
    console = ConsoleLogFilter("warnings")
    assert record_level(_router_tokenizer_warning(random_init)) == "WARNING"
    assert not console.shows(_router_tokenizer_warning(random_init))
    assert not console.shows("  a continuation line of that record")
    assert console.shows(_python_record(logging.WARNING, "the next warning"))
    assert console.shows(_router_tokenizer_warning("Qwen/Qwen3-0.6B"))  # a hub id that cannot be fetched: shown
