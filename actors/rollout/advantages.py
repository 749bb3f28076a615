"""Advantages from a rollout batch's rewards, the dynamic-sampling filter, and DP shards (pure functions).

The rollout computes advantages over the whole batch before splitting it into shards, so a whitening covers every rank.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

EPS = 1e-6
Estimator = Literal["grpo", "dr_grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"]
ESTIMATORS: tuple[str, ...] = ("grpo", "dr_grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline")


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


def whiten_over_tokens(values: Sequence[float], token_counts: Sequence[int]) -> list[float]:
    """Per-sample values whitened as verl's ``masked_whiten`` whitens a [batch, tokens] tensor holding each value on
    each of its sample's tokens: token-weighted mean, Bessel-corrected variance, ``(x - mean) / sqrt(var + 1e-8)``."""
    weights = [max(int(n), 0) for n in token_counts]
    total = sum(weights)
    if total < 2:
        return [0.0 for _ in values]
    mean = sum(v * n for v, n in zip(values, weights, strict=True)) / total
    var = sum(n * (v - mean) ** 2 for v, n in zip(values, weights, strict=True)) / total * total / (total - 1)
    return [(v - mean) / math.sqrt(var + 1e-8) for v in values]


def compute_advantages(
    rewards: Sequence[float],
    group_size: int,
    *,
    estimator: Estimator = "grpo",
    response_lengths: Sequence[int] | None = None,
    whiten: bool = False,
) -> list[float]:
    """One advantage per sample; ``response_lengths`` weight the token whitening (default: one token each).

    Estimators (verl's ``core_algos.py`` names; outcome rewards, one per sample, consecutive groups of one prompt):
    ``grpo`` (reward minus its group's mean, over the group's std), ``dr_grpo`` (no std), ``rloo`` (minus the mean
    of the *other* samples of the group), ``reinforce_plus_plus`` (the reward whitened over the batch's tokens),
    ``reinforce_plus_plus_baseline`` (minus the group mean, then whitened over the batch's tokens). ``whiten``
    whitens any of them over the batch's tokens as well.
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"advantage_estimator {estimator!r} is not one of {list(ESTIMATORS)}")
    lengths = list(response_lengths) if response_lengths is not None else [1] * len(rewards)
    if len(lengths) != len(rewards):
        raise ValueError(f"{len(lengths)} response lengths for {len(rewards)} rewards")
    if estimator in ("grpo", "dr_grpo"):
        advantages = group_advantages(rewards, group_size, normalize_std=estimator == "grpo")
    elif estimator == "reinforce_plus_plus":
        advantages, whiten = [float(r) for r in rewards], True
    else:
        centred = group_advantages(rewards, group_size, normalize_std=False)
        if estimator == "rloo":  # r - mean(others) = n / (n - 1) * (r - mean)
            scale = group_size / (group_size - 1) if group_size > 1 else 0.0
            advantages = [a * scale for a in centred]
        else:
            advantages, whiten = centred, True
    return whiten_over_tokens(advantages, lengths) if whiten else advantages


def informative_groups(rewards: Sequence[float], group_size: int) -> list[bool]:
    """Per group: do its rewards differ (DAPO's dynamic sampling keeps only those; a group of equal rewards has
    zero advantage under every group-baseline estimator and only dilutes the batch)."""
    if group_size < 1 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    groups = [rewards[start : start + group_size] for start in range(0, len(rewards), group_size)]
    return [max(group) - min(group) > EPS for group in groups]


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
