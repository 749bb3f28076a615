"""A run directory's records, indexed by step, refreshed from the growing JSONL files on every read.

What the dashboard's API answers from, so a request never rereads a whole file.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from actors.dashboard.jsonl_tail import JsonlTail, LineProblem
from actors.dashboard.records import SOURCES, STATUS_FILE, STREAMS, reward_stats

SampleKey = tuple[int, int]  # (sample_index, occurrence)
MAX_INDEX = 10**9


def _index(record: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = record.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_INDEX:
        return None
    return value


class RunStore:
    """The records of one run directory: ``samples.jsonl`` and ``steps.jsonl`` (:mod:`.records`), read through
    :class:`.JsonlTail` and kept in memory. Thread-safe: the HTTP server's threads share one store."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._tails = {name: JsonlTail(run_dir / file) for name, file in STREAMS.items()}
        self._samples: dict[int, dict[SampleKey, dict[str, Any]]] = {}
        self._steps: dict[int, list[dict[str, Any]]] = {}
        self._bad_records: list[LineProblem] = []
        self._lock = threading.Lock()

    def refresh(self) -> None:
        """Take in the lines completed since the last refresh. A record whose ``step``, ``sample_index`` or
        ``occurrence`` is not a non-negative integer is skipped and listed in ``problems()`` with its line."""
        with self._lock:
            tail = self._tails["samples"]
            for number, record in tail.read_new():
                step, index = _index(record, "step"), _index(record, "sample_index")
                occurrence = _index(record, "occurrence", 0)
                if step is None or index is None or occurrence is None:
                    self._bad(tail.path.name, number, "step, sample_index and occurrence must be integers >= 0")
                    continue
                self._samples.setdefault(step, {})[(index, occurrence)] = record
            tail = self._tails["steps"]
            for number, record in tail.read_new():
                step = _index(record, "step")
                if step is None or record.get("source") not in SOURCES:
                    self._bad(tail.path.name, number, "needs an integer step >= 0 and a known source")
                    continue
                self._steps.setdefault(step, []).append(record)

    def _bad(self, file: str, line: int, reason: str) -> None:
        if len(self._bad_records) < 100:
            self._bad_records.append(LineProblem(file, line, reason))

    def step_numbers(self) -> list[int]:
        with self._lock:
            return sorted(set(self._samples) | set(self._steps))

    def steps(self) -> list[dict[str, Any]]:
        """One summary per step, in order: reward stats, loss, timings, tokens/s, CPU use per host."""
        with self._lock:
            return [self._summary(n) for n in sorted(set(self._samples) | set(self._steps))]

    def step(self, number: int) -> dict[str, Any] | None:
        """The step's summary and its raw metric records, or None if the run has no such step."""
        with self._lock:
            if number not in self._samples and number not in self._steps:
                return None
            return {**self._summary(number), "records": list(self._steps.get(number, []))}

    def samples(self, number: int) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._samples.get(number, {}).values())

    def sample(self, number: int, index: int, occurrence: int) -> dict[str, Any] | None:
        with self._lock:
            return self._samples.get(number, {}).get((index, occurrence))

    def problems(self) -> dict[str, Any]:
        """Malformed lines and bad records (first 100 each kind), their counts, and a torn last line if any."""
        with self._lock:
            lines = [p for tail in self._tails.values() for p in tail.problems] + self._bad_records
            return {
                "count": sum(t.problem_count for t in self._tails.values()) + len(self._bad_records),
                "lines": [vars(p) for p in lines[:200]],
                "incomplete_last_line": {n: t.pending_bytes for n, t in self._tails.items() if t.pending_bytes},
            }

    def collector_status(self) -> dict[str, Any] | None:
        """The collector's ``collector.json`` (written, refused, dropped), or None."""
        try:
            status = json.loads((self.run_dir / STATUS_FILE).read_text())
        except (OSError, ValueError):
            return None
        return status if isinstance(status, dict) else None

    def _summary(self, number: int) -> dict[str, Any]:
        samples = self._samples.get(number, {})
        rewards = [float(r["reward"]) for r in samples.values() if _is_number(r.get("reward"))]
        records = self._steps.get(number, [])
        rollout = next((r for r in reversed(records) if r.get("source") == "rollout"), {})
        trainers = [r for r in records if r.get("source") == "trainer"]
        losses = [float(r["loss"]) for r in trainers if _is_number(r.get("loss"))]
        hosts: dict[str, Any] = {}
        for record in [rollout, *trainers]:
            if isinstance(record.get("cpu"), dict) and isinstance(record["cpu"].get("host"), str):
                hosts[record["cpu"]["host"][:100]] = record["cpu"].get("cpu_percent")
        return {
            "step": number,
            "samples": len(samples),
            **reward_stats(rewards),
            "loss": sum(losses) / len(losses) if losses else None,
            "rollout_s": _number(rollout.get("rollout_s")),
            "train_s": max((_number(r.get("train_s")) or 0.0 for r in trainers), default=None),
            "tokens_per_s": _number(rollout.get("tokens_per_s")),
            "cpu_percent_by_host": hosts,
            **drift_summary(trainers),
        }


# The trainer's step metrics (actors/trainer/objectives.py) the page charts: how far the engines' samples drift
# from the trainer's policy, and what the objective did about it.
DRIFT_KEYS = ("train_rollout_logprob_abs_diff", "mismatch_k3_kl", "ess_ratio", "pg_clipfrac", "tis_clipfrac",
              "entropy", "ref_kl", "grad_norm")  # fmt: skip


def drift_summary(trainers: list[dict[str, Any]]) -> dict[str, float | None]:
    """Each DRIFT_KEYS metric, the mean over the step's trainer records (ranks report the same global value),
    and ``version_lags``: token fraction per weight-version lag (``version_lag_{k}_frac``)."""
    summary: dict[str, Any] = {}
    for key in DRIFT_KEYS:
        values = [float(r[key]) for r in trainers if _is_number(r.get(key))]
        summary[key] = sum(values) / len(values) if values else None
    lags = trainers[0] if trainers else {}
    summary["version_lags"] = {
        key.removeprefix("version_lag_").removesuffix("_frac"): float(value)
        for key, value in lags.items()
        if key.startswith("version_lag_") and _is_number(value)
    }
    return summary


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(value: Any) -> float | None:
    return float(value) if _is_number(value) else None
