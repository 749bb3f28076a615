"""What the demo shows a person: one line per iteration, and a plot at the end."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

# The trainer's drift metrics (actors/trainer/objectives.py) a person watches: the engines' logprobs against the
# trainer's, the effective sample size of the importance weights, and how often a clip or truncation fired.
DRIFT_COLUMNS = (("|dlogp|", "train_rollout_logprob_abs_diff", 8, ".4f"), ("ess", "ess_ratio", 5, ".3f"),
                 ("clip", "clipfrac", 5, ".3f"))  # fmt: skip


def clip_fraction(metrics: dict[str, float]) -> float | None:
    """The fraction of tokens a clip changed: TIS truncation when the objective uses it, else the PPO clip."""
    return metrics.get("tis_clipfrac", metrics.get("pg_clipfrac"))


@dataclass
class IterationRecord:
    iteration: int
    reward: float
    loss: float
    tokens_per_s: float
    rollout_s: float
    train_s: float
    sync_s: float
    metrics: dict[str, float] = field(default_factory=dict)  # the trainer's step metrics (objectives.py)

    def drift(self, key: str) -> float | None:
        return clip_fraction(self.metrics) if key == "clipfrac" else self.metrics.get(key)


@dataclass
class ProgressBoard:
    """Prints a header, then one aligned line per iteration; keeps the history for the plot."""

    total: int
    stream: TextIO = sys.stdout
    history: list[IterationRecord] = field(default_factory=list)
    wall_s: float = 0.0  # the loop's wall time, after the first weight push
    retries: int = 0  # generation requests sent again (transient failures)
    tokens: int = 0  # generated tokens trained on
    engine_busy: float = 0.0  # the engines' generating time over wall_s (actors/demo/engine_busy.py)

    def header(self) -> None:
        drift = " ".join(f"{name:>{width}}" for name, _, width, _ in DRIFT_COLUMNS)
        print(
            f"{'iter':>9} {'reward':>7} {'loss':>8} {'gen tok/s':>10} "
            f"{'rollout':>8} {'train':>7} {'w-sync':>7} {drift}",
            file=self.stream, flush=True,
        )  # fmt: skip

    def add(self, record: IterationRecord) -> None:
        self.history.append(record)
        trend = ""
        if len(self.history) > 1:
            delta = record.reward - self.history[0].reward
            trend = f"  ({'+' if delta >= 0 else ''}{delta:.3f} since start)"
        print(
            f"{record.iteration:>4}/{self.total:<4} {record.reward:7.3f} {record.loss:8.4f} "
            f"{record.tokens_per_s:10.0f} {record.rollout_s:7.2f}s {record.train_s:6.2f}s {record.sync_s:6.2f}s "
            + " ".join(_cell(record.drift(key), width, spec) for _, key, width, spec in DRIFT_COLUMNS) + trend,
            file=self.stream, flush=True,
        )  # fmt: skip

    def plot(self, path: Path) -> Path:
        """Reward and loss per iteration, as a PNG."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        iterations = [r.iteration for r in self.history]
        figure, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
        top.plot(iterations, [r.reward for r in self.history], marker="o", label="mean reward")
        top.set_ylabel("reward")
        top.legend()
        top.grid(alpha=0.3)
        bottom.plot(iterations, [r.loss for r in self.history], marker="o", color="tab:red")
        bottom.set_ylabel("policy-gradient loss")
        bottom.set_xlabel("iteration")
        bottom.grid(alpha=0.3)
        figure.suptitle("miles-actors demo: GRPO on the copy task (CPU)")
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=100)
        plt.close(figure)
        return path


def _cell(value: float | None, width: int, spec: str) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:{width}{spec}}"
