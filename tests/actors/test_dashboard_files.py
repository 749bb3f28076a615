"""The dashboard's files: JSONL written whole, read as it grows; a torn last line is never data.

Mirrors miles' dashboard store (radixark/miles miles/dashboard/store.py: append-only JSONL streams tailed by byte
offset, only complete lines parsed) and the read-side lessons of its docs ("Reading a run that is still being
written"): a live run must not look like a corrupt one, a corrupt line must not break the rest.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from dashboard_fixtures import sample, write_run

from actors.dashboard.jsonl_tail import JsonlTail
from actors.dashboard.records import MAX_LINE_BYTES, encode_line, reward_stats
from actors.dashboard.run_store import RunStore


def test_torn_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    whole = encode_line({"step": 1, "x": 1})
    torn = encode_line({"step": 2, "x": 2})
    path.write_bytes(whole + torn[:7])  # a crash (or a live writer) mid-line
    tail = JsonlTail(path)
    assert tail.read_new() == [(1, {"v": 1, "step": 1, "x": 1})]
    assert tail.pending_bytes == 7 and tail.problem_count == 0
    with path.open("ab") as handle:
        handle.write(torn[7:])
    assert tail.read_new() == [(2, {"v": 1, "step": 2, "x": 2})]
    assert tail.pending_bytes == 0 and tail.read_new() == []


def test_malformed_lines_are_reported_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "steps.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": 2,\n[1, 2]\n\n' + b"\xff\xfe\n" + b'{"step": 3}\n')
    tail = JsonlTail(path)
    assert [record["step"] for _, record in tail.read_new()] == [1, 3]
    assert [(p.line, p.reason.split(":")[0]) for p in tail.problems] == [
        (2, "not JSON"), (3, "a JSON list, not an object"), (5, "not JSON")]  # fmt: skip


def test_an_overlong_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    path.write_bytes(b'{"a": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n{"step": 4}\n')
    tail = JsonlTail(path)
    assert [record for _, record in tail.read_new()] == [{"step": 4}]
    assert "longer than" in tail.problems[0].reason


def test_a_replaced_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "steps.jsonl"
    path.write_bytes(encode_line({"step": 1}) * 3)
    tail = JsonlTail(path)
    assert len(tail.read_new()) == 3
    path.write_bytes(encode_line({"step": 9}))
    assert [record["step"] for _, record in tail.read_new()] == [9]


def test_records_are_strict_json() -> None:
    line = encode_line({"reward": math.nan, "logprobs": [0.5, -math.inf], "nested": {"x": math.inf}})
    assert json.loads(line) == {"v": 1, "reward": None, "logprobs": [0.5, None], "nested": {"x": None}}
    record = sample(3, 5, 0.5)
    assert record["token_ids"] == [256, 99, 61, 97, 98]
    assert record["loss_mask"] == [0, 0, 0, 1, 1] and record["logprobs"] == [None, None, None, -0.1, -2.5]
    assert reward_stats([0.0, 1.0]) == {"reward_mean": 0.5, "reward_std": 0.5, "reward_min": 0.0, "reward_max": 1.0}


def test_run_store_indexes_steps_and_follows_growth(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", {1: [0.0, 1.0], 2: [0.5, 0.25, 0.75]})
    store = RunStore(run)
    store.refresh()
    steps = store.steps()
    assert [s["step"] for s in steps] == [1, 2] and [s["samples"] for s in steps] == [2, 3]
    assert steps[1]["reward_mean"] == 0.5 and steps[1]["loss"] == 0.2
    assert steps[0]["cpu_percent_by_host"] == {"local": 50.0}
    assert store.sample(2, 1, 0)["reward"] == 0.25 and store.sample(2, 9, 0) is None
    with (run / "samples.jsonl").open("ab") as handle:  # the run goes on
        handle.write(encode_line(sample(3, 0, 1.0)) + b'{"step": 3, "sample_index": -1}\n{"broken')
    store.refresh()
    assert store.step_numbers() == [1, 2, 3] and store.samples(3)[0]["reward"] == 1.0
    problems = store.problems()
    assert problems["count"] == 1 and problems["lines"][0]["line"] == 7
    assert problems["incomplete_last_line"] == {"samples": len(b'{"broken')}
