"""Recording: the collector actor (a real process) and the producers' fire-and-forget recorder.

As miles' DashboardCollector (radixark/miles miles/dashboard/collector.py: a named actor on the driver's node,
producers call it fire-and-forget, bounded buffers with counted drops), with the queue in the producer so that a
slow, dead or absent collector never holds up generation or training.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dashboard_fixtures import sample

from actors.dashboard.collector import DashboardCollector
from actors.dashboard.recorder import ENV_VAR, DashboardRecorder
from actors.dashboard.records import MAX_LINE_BYTES
from runtime import ActorHandle, spawn

pytestmark = pytest.mark.processes


@pytest.fixture
def collector(tmp_path: Path, no_leaks: None) -> Iterator[tuple[ActorHandle, str, Path]]:
    name = f"dashboard-test-{uuid.uuid4().hex[:8]}"
    run_dir = tmp_path / "run"
    handle = spawn(DashboardCollector, kwargs={"run_dir": str(run_dir)}, name=name)
    try:
        yield handle, name, run_dir
    finally:
        handle.kill()


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_recorder_sends_to_the_collector(collector: tuple[ActorHandle, str, Path]) -> None:
    handle, name, run_dir = collector
    recorder = DashboardRecorder(name, source="rollout")
    for i in range(3):
        recorder.record("samples", sample(1, i, i / 2))
    recorder.record("steps", {"step": 1, "source": "rollout", "rollout_s": 0.5})
    assert recorder.flush(timeout_s=30) and recorder.sent == 4 and recorder.dropped == 0
    assert [r["reward"] for r in lines(run_dir / "samples.jsonl")] == [0.0, 0.5, 1.0]
    assert lines(run_dir / "steps.jsonl") == [{"v": 1, "step": 1, "source": "rollout", "rollout_s": 0.5}]
    stats = handle.stats().result(timeout=10)
    assert stats["written"] == {"samples": 3, "steps": 1}
    assert json.loads((run_dir / "collector.json").read_text())["written"] == stats["written"]


def test_collector_refuses_what_it_cannot_write(collector: tuple[ActorHandle, str, Path]) -> None:
    handle, _, run_dir = collector
    with pytest.raises(ValueError, match=r"unknown dashboard stream '../../etc/passwd'; streams: \['samples'"):
        handle.append("../../etc/passwd", [{"step": 1}]).result(timeout=10)
    big = {"step": 1, "sample_index": 0, "response": "x" * (MAX_LINE_BYTES + 1)}
    assert handle.append("samples", [big, sample(1, 1, 1.0)], "rollout", 7).result(timeout=30) == 1
    stats = handle.stats().result(timeout=10)
    assert stats["refused"] == 1 and stats["dropped"] == {"rollout": 7} and stats["written"]["samples"] == 1
    assert [r["sample_index"] for r in lines(run_dir / "samples.jsonl")] == [1]


def test_recording_never_waits_for_a_missing_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = DashboardRecorder(f"no-such-collector-{uuid.uuid4().hex[:8]}", source="trainer-0", max_queued=5)
    for i in range(100):  # the queue holds 5: the rest is dropped at once, nothing waits for the lookup
        recorder.record("steps", {"step": i, "source": "trainer"})
    assert recorder.dropped >= 95
    assert recorder.flush(timeout_s=30) and recorder.dropped == 100 and recorder.sent == 0
    monkeypatch.delenv(ENV_VAR, raising=False)
    off = DashboardRecorder(None, source="rollout")
    off.record("steps", {"step": 1})
    assert not off.enabled and off.flush(0) and off.dropped == 0
    monkeypatch.setenv(ENV_VAR, "dashboard-0-0")
    assert DashboardRecorder(None, source="rollout").collector_name == "dashboard-0-0"
