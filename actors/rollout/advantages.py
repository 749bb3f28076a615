"""GRPO-style advantages and splitting a rollout into data-parallel shards (pure functions)."""

from __future__ import annotations

import math
from collections.abc import Sequence

EPS = 1e-6


def group_advantages(rewards: Sequence[float], group_size: int, *, normalize_std: bool = True) -> list[float]:
    """Per sample: its reward minus its group's mean (divided by the group's std if ``normalize_std``).

    ``rewards`` holds consecutive groups of ``group_size`` samples of the same prompt. A group whose rewards are
    all equal carries no signal: its advantages are 0. Each group's advantages sum to 0.
    """
    if group_size < 1 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    advantages: list[float] = []
    for start in range(0, len(rewards), group_size):
        group = [float(r) for r in rewards[start : start + group_size]]
        mean = sum(group) / group_size
        centred = [r - mean for r in group]
        if normalize_std:
            std = math.sqrt(sum(c * c for c in centred) / group_size)
            centred = [c / (std + EPS) for c in centred] if std > EPS else [0.0] * group_size
        advantages.extend(centred)
    return advantages


def balanced_ranges(count: int, parts: int) -> list[range]:
    """``parts`` consecutive ranges covering ``range(count)``, sizes differing by at most one."""
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}")
    base, extra = divmod(count, parts)
    ranges, start = [], 0
    for part in range(parts):
        size = base + (1 if part < extra else 0)
        ranges.append(range(start, start + size))
        start += size
    return ranges
