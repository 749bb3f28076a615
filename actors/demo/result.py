"""The job's last console line: ``RESULT {json}``, the run's figures for people and scripts alike.

Both demos (``actors.demo:main`` and ``actors.demo.async_loop:main``) print it with the same keys, so their runs can
be compared line by line.
"""

from __future__ import annotations

import json
from typing import Any

from actors.demo.progress import ProgressBoard, clip_fraction

# The trainer's metrics the RESULT line carries, each the mean over the run's iterations (when the trainer gave it).
DRIFT_KEYS = ("train_rollout_logprob_abs_diff", "mismatch_k3_kl", "ess_ratio", "pg_clipfrac", "tis_clipfrac",
              "entropy", "ref_kl", "grad_norm")  # fmt: skip


def mean_rewards(board: ProgressBoard) -> tuple[float, float]:
    """Mean reward of the first two and of the last two iterations."""
    window = min(2, len(board.history))
    first = sum(r.reward for r in board.history[:window]) / window
    last = sum(r.reward for r in board.history[-window:]) / window
    return first, last


def result_line(
    board: ProgressBoard, *, mode: str, engine_busy_fraction: float, busy_s: float, wall_s: float, **counts: Any
) -> str:
    """``RESULT {...}`` with iterations, rewards, engine_busy_fraction, the trainer's drift metrics (run means),
    the sample counts (0 unless given), and each iteration's reward and loss."""
    first, last = mean_rewards(board)
    figures: dict[str, Any] = {
        "mode": mode,
        "iterations": len(board.history),
        "reward_first": round(first, 4),
        "reward_last": round(last, 4),
        # The engines' own generating time over the loop's wall time, averaged over the engines (engine_busy.py).
        "engine_busy_fraction": round(engine_busy_fraction, 4),
        # The time at least one generation request was out (and the engines not paused for a push), seen by the
        # rollout.
        "request_busy_fraction": round(busy_s / wall_s, 4) if wall_s > 0 else 0.0,
        "wall_s": round(wall_s, 2),
        "tokens_per_s": round(board.tokens / wall_s, 1) if wall_s > 0 else 0.0,
        "max_staleness_seen": 0,
        "samples_dropped_stale": 0,
        "samples_retried": 0,
        "samples_lost": 0,
        **drift_means(board),
        **counts,
        # per iteration, unrounded: scripts compare runs step by step (tests/e2e/test_async_equivalence.py)
        "rewards": [r.reward for r in board.history],
        "losses": [r.loss for r in board.history],
    }
    return "RESULT " + json.dumps(figures, sort_keys=False)


def drift_means(board: ProgressBoard) -> dict[str, float]:
    """The mean of each of DRIFT_KEYS over the iterations that reported it."""
    means: dict[str, float] = {}
    for key in DRIFT_KEYS:
        values = [r.metrics[key] for r in board.history if key in r.metrics]
        if values:
            means[key] = round(sum(values) / len(values), 6)
    clipped = [c for c in (clip_fraction(r.metrics) for r in board.history) if c is not None]
    if clipped:
        means["clipfrac"] = round(sum(clipped) / len(clipped), 6)
    return means
