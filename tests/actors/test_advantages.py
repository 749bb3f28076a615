"""Advantage estimators and filters (actors/rollout/advantages.py) against verl's formulas, re-expressed here.

Source: verl ``volcengine/verl`` ``verl/trainer/ppo/core_algos.py`` @ 012be9d9 (``compute_grpo_outcome_advantage``
with ``norm_adv_by_std_in_grpo=False``, ``compute_rloo_outcome_advantage``,
``compute_reinforce_plus_plus_outcome_advantage``, ``compute_reinforce_plus_plus_baseline_outcome_advantage``)
and ``verl/utils/torch_functional.py`` ``masked_whiten`` (masked mean, Bessel-corrected masked variance).
Rewards are outcome rewards: verl's token_level_rewards hold each on its response's last token.
"""

from __future__ import annotations

import pytest
import torch

from actors.rollout.advantages import compute_advantages, group_advantages, informative_groups
from actors.rollout.async_executor import newest_version_mask

REWARDS = [1.0, 0.0, 0.5, 0.25, 2.0, 2.0, 1.0, -1.0, 0.0, 3.0, 1.5, 0.5]
LENGTHS = [3, 5, 2, 4, 4, 1, 6, 2, 3, 3, 5, 2]
GROUP = 4


def verl_inputs() -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    width = max(LENGTHS)
    mask = torch.zeros(len(REWARDS), width)
    token_rewards = torch.zeros(len(REWARDS), width)
    for row, (reward, n) in enumerate(zip(REWARDS, LENGTHS, strict=True)):
        mask[row, :n] = 1
        token_rewards[row, n - 1] = reward
    return token_rewards, mask, [row // GROUP for row in range(len(REWARDS))]


def masked_whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mean = (values * mask).sum() / mask.sum()
    var = (((values - mean) ** 2) * mask).sum() / mask.sum() * mask.sum() / (mask.sum() - 1)
    return (values - mean) * torch.rsqrt(var + 1e-8)


def group_means(scores: torch.Tensor, index: list[int]) -> torch.Tensor:
    return torch.stack([scores[[j for j, g in enumerate(index) if g == index[i]]].mean() for i in range(len(index))])


def per_sample(advantages: torch.Tensor, mask: torch.Tensor) -> list[float]:
    """verl's token-level advantages are constant over a response: the first token's value."""
    assert torch.allclose(advantages * mask, advantages[:, :1] * mask, atol=1e-6)
    return advantages[:, 0].tolist()


def test_dr_grpo_and_rloo_match_verl() -> None:
    token_rewards, _mask, index = verl_inputs()
    scores = token_rewards.sum(-1)
    means = group_means(scores, index)
    assert compute_advantages(REWARDS, GROUP, estimator="dr_grpo") == pytest.approx((scores - means).tolist())
    n = GROUP
    rloo = scores * n / (n - 1) - means * n / (n - 1)
    assert compute_advantages(REWARDS, GROUP, estimator="rloo") == pytest.approx(rloo.tolist())


def test_reinforce_plus_plus_matches_verl() -> None:
    token_rewards, mask, _index = verl_inputs()
    returns = torch.zeros_like(token_rewards)
    running = torch.zeros(len(REWARDS))
    for t in reversed(range(token_rewards.shape[1])):  # gamma = 1, reset after EOS
        running = token_rewards[:, t] + running
        returns[:, t] = running
        running = running * mask[:, t]
    expected = per_sample(masked_whiten(returns, mask) * mask, mask)
    ours = compute_advantages(REWARDS, GROUP, estimator="reinforce_plus_plus", response_lengths=LENGTHS)
    assert ours == pytest.approx(expected, abs=1e-5)


def test_reinforce_plus_plus_baseline_matches_verl() -> None:
    token_rewards, mask, index = verl_inputs()
    scores = token_rewards.sum(-1)
    centred = (scores - group_means(scores, index)).unsqueeze(-1).tile([1, mask.shape[1]]) * mask
    expected = per_sample(masked_whiten(centred, mask) * mask, mask)
    ours = compute_advantages(REWARDS, GROUP, estimator="reinforce_plus_plus_baseline", response_lengths=LENGTHS)
    assert ours == pytest.approx(expected, abs=1e-5)


def test_grpo_is_todays_and_whitening_covers_the_batch() -> None:
    assert compute_advantages(REWARDS, GROUP) == group_advantages(REWARDS, GROUP)
    whitened = compute_advantages(REWARDS, GROUP, estimator="dr_grpo", response_lengths=LENGTHS, whiten=True)
    tokens = sum(LENGTHS)
    mean = sum(a * n for a, n in zip(whitened, LENGTHS, strict=True)) / tokens
    var = sum(n * (a - mean) ** 2 for a, n in zip(whitened, LENGTHS, strict=True)) / (tokens - 1)
    assert mean == pytest.approx(0.0, abs=1e-6) and var == pytest.approx(1.0, rel=1e-4)
    with pytest.raises(ValueError, match="advantage_estimator 'ppo'"):
        compute_advantages(REWARDS, GROUP, estimator="ppo")  # type: ignore[arg-type]


def test_dynamic_sampling_keeps_groups_whose_rewards_differ() -> None:
    assert informative_groups(REWARDS, GROUP) == [True, True, True]
    assert informative_groups([1.0, 1.0, 0.0, 0.0, 0.5, 0.5], 2) == [False, False, False]
    assert informative_groups([1.0, 1.0, 0.0, 1.0], 2) == [False, True]


def test_mask_offpolicy_in_partial_rollout_trains_the_newest_version_only() -> None:
    mask = [0, 0, 1, 1, 1, 1]
    assert newest_version_mask(mask, ["v1", "v1", "v2", "v2"]) == [0, 0, 0, 0, 1, 1]
    assert newest_version_mask(mask, ["v2"] * 4) == mask
