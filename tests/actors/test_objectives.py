"""The objective (actors/trainer/objectives.py) against each peer's own formula, re-expressed here from its source.

Sources (read with the code-search tools; their code is not copied into the product):

- miles ``radixark/miles`` ``miles/utils/ppo_utils.py`` @ 06ea7c62: ``compute_policy_loss``, ``compute_approx_kl``;
  ``miles/backends/megatron_utils/loss.py`` @ 9c19d02e: ``vanilla_tis_function``, ``icepop_function`` and the
  per-sequence ESS ratio next to them.
- verl ``volcengine/verl`` ``verl/trainer/ppo/core_algos.py`` @ 012be9d9: ``compute_policy_loss_vanilla``,
  ``compute_policy_loss_gspo``, ``agg_loss``.
- AReaL ``inclusionAI/AReaL`` ``areal/utils/functional.py`` @ 072480e2: ``ppo_actor_loss_fn``; the proximal
  interpolation ``compute_prox_logp_approximations`` (method ``loglinear``), ``areal/trainer/ppo/actor.py``.
- CISPO: MiniMax-M1 (arXiv 2506.13585), eq. 4: ``sg(clip(r, 1 - eps_low, 1 + eps_high)) * A * log pi``.
"""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from actors.trainer.objective_config import off_policy_problems
from actors.trainer.objectives import (
    ObjectiveConfig,
    aggregate,
    approx_kl,
    batch_units,
    interpolate_proximal,
    mismatch_metrics,
    policy_loss,
)


def _batch(seed: int = 0, b: int = 4, s: int = 7) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(b, s)
    for row, n in enumerate([7, 3, 5, 1][:b]):
        mask[row, s - n :] = 1  # responses at the end, prompts before (like the trainer's packed rows)
    old = -torch.rand(b, s, generator=g) * 3 - 0.05
    return {
        "logprobs": (old + torch.randn(b, s, generator=g) * 0.4).requires_grad_(),
        "old": old,
        "rollout": old + torch.randn(b, s, generator=g) * 0.5,
        "ref": old + torch.randn(b, s, generator=g) * 0.3,
        "adv": torch.randn(b, 1, generator=g).expand(b, s).clone(),
        "mask": mask,
    }


def _loss(t: dict[str, torch.Tensor], **config: object) -> tuple[torch.Tensor, dict[str, float]]:
    return policy_loss(logprobs=t["logprobs"], old_logprobs=t["old"], rollout_logprobs=t["rollout"],
                       advantages=t["adv"], loss_mask=t["mask"], config=ObjectiveConfig(**config))  # fmt: skip


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # verl_F.masked_mean
    return (x * mask).sum() / mask.sum()


def _same(ours: torch.Tensor, theirs: torch.Tensor, wrt: torch.Tensor) -> None:
    """Equal values and equal gradients with respect to ``wrt``."""
    assert torch.allclose(ours, theirs, atol=1e-6), (float(ours), float(theirs))
    (g_ours,) = torch.autograd.grad(ours, wrt, retain_graph=True)
    (g_theirs,) = torch.autograd.grad(theirs, wrt, retain_graph=True)
    assert torch.allclose(g_ours, g_theirs, atol=1e-6)


# ---- re-expressed peer formulas -------------------------------------------------------------------------------


def miles_compute_policy_loss(ppo_kl, advantages, eps_clip, eps_clip_high, eps_clip_c=None):
    ratio = (-ppo_kl).exp()
    pg_losses1 = -ratio * advantages
    pg_losses2 = -ratio.clamp(1 - eps_clip, 1 + eps_clip_high) * advantages
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    clipfrac = torch.gt(pg_losses2, pg_losses1).float()
    if eps_clip_c is None:
        return clip_pg_losses1, clipfrac
    clip_pg_losses2 = torch.min(-eps_clip_c * advantages, clip_pg_losses1)
    return torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1), clipfrac


def miles_compute_approx_kl(log_probs, log_probs_base, kl_loss_type):
    log_ratio = log_probs.float() - log_probs_base.float()
    if kl_loss_type == "k1":
        kl = log_ratio
    elif kl_loss_type == "k2":
        kl = log_ratio**2 / 2.0
    else:
        log_ratio = -log_ratio
        kl = log_ratio.exp() - 1 - log_ratio
    return torch.clamp(kl, min=-10, max=10) if kl_loss_type == "low_var_kl" else kl


def verl_agg_loss(loss_mat, loss_mask, mode):
    if mode == "token-mean":
        return _masked_mean(loss_mat, loss_mask)
    seq_sums = torch.sum(loss_mat * loss_mask, dim=-1)
    if mode == "seq-mean-token-sum":
        return torch.mean(seq_sums)
    if mode == "seq-mean-token-mean":
        return torch.mean(seq_sums / torch.sum(loss_mask, dim=-1))
    return torch.sum(seq_sums) / loss_mask.shape[-1]  # seq-mean-token-sum-norm


def verl_gspo(old_log_prob, log_prob, advantages, response_mask, clip_low, clip_high):
    negative_approx_kl = log_prob - old_log_prob
    seq_lengths = torch.sum(response_mask, dim=-1).clamp(min=1)
    negative_approx_kl_seq = torch.sum(negative_approx_kl * response_mask, dim=-1) / seq_lengths
    log_seq_ratio = log_prob - log_prob.detach() + negative_approx_kl_seq.detach().unsqueeze(-1)
    seq_ratio = torch.exp(torch.clamp(log_seq_ratio, max=10.0))
    pg_losses1 = -advantages * seq_ratio
    pg_losses2 = -advantages * torch.clamp(seq_ratio, 1 - clip_low, 1 + clip_high)
    return verl_agg_loss(torch.maximum(pg_losses1, pg_losses2), response_mask, "seq-mean-token-mean")


def areal_ppo_actor_loss_fn(logprobs, proximal_logprobs, old_logprobs, advantages, eps_clip, loss_mask,
                            eps_clip_higher=None, c_clip=None, behav_imp_weight_cap=None):  # fmt: skip
    loss_mask = loss_mask.bool()
    count = loss_mask.count_nonzero() or 1
    ratio = torch.where(loss_mask, torch.exp(logprobs - proximal_logprobs), 0)
    clipped = torch.clamp(ratio, 1.0 - eps_clip, 1.0 + (eps_clip if eps_clip_higher is None else eps_clip_higher))
    pg_loss = torch.max(-advantages * ratio, -advantages * clipped)
    if c_clip is not None:
        pg_loss = torch.min(pg_loss, torch.sign(advantages) * c_clip * advantages)
    behav_imp_weight = (proximal_logprobs - old_logprobs).exp()
    behav_mask = loss_mask
    if behav_imp_weight_cap is not None:
        behav_mask = (behav_imp_weight <= behav_imp_weight_cap).logical_and(loss_mask)
    behav_imp_weight = torch.where(behav_mask, behav_imp_weight, 0.0)
    return torch.where(loss_mask, pg_loss * behav_imp_weight, 0).sum() / count


def areal_loglinear(old_logp, logprobs, versions, current_version):
    v_proximal, v_behave, v_theta = current_version - 1, versions.float(), float(current_version)
    version_diff, version_gap = v_theta - v_behave, v_proximal - v_behave
    alpha = torch.where((version_diff > 0) & (versions >= 0), version_gap / version_diff, torch.zeros_like(v_behave))
    return old_logp + torch.clamp(alpha, 0.0, 1.0) * (logprobs - old_logp)


# ---- the tests -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("high, dual", [(0.2, None), (0.28, None), (0.2, 3.0)])
def test_ppo_clip_matches_miles_and_verl(high: float, dual: float | None) -> None:
    t = _batch()
    ours, metrics = _loss(t, policy_loss="ppo_clip", eps_clip=0.2, eps_clip_high=high, eps_clip_c=dual)
    losses, clipfrac = miles_compute_policy_loss(t["old"] - t["logprobs"], t["adv"], 0.2, high, dual)
    _same(ours, verl_agg_loss(losses, t["mask"], "token-mean"), t["logprobs"])
    assert metrics["pg_clipfrac"] == pytest.approx(float(_masked_mean(clipfrac, t["mask"])))
    assert 0 < metrics["pg_clipfrac"] < 1  # the fixture's ratios are far enough from 1 for the clip to fire


def test_bypass_takes_the_ratio_against_rollout_logprobs() -> None:
    t = _batch()
    ours, _ = _loss(t, policy_loss="ppo_clip", use_rollout_logprobs=True)
    losses, _ = miles_compute_policy_loss(t["rollout"] - t["logprobs"], t["adv"], 0.2, 0.2)
    _same(ours, verl_agg_loss(losses, t["mask"], "token-mean"), t["logprobs"])


def test_gspo_matches_verl() -> None:
    t = _batch(1)
    ours, _ = _loss(t, policy_loss="gspo", eps_clip=3e-4, eps_clip_high=4e-4, loss_agg="seq_mean_token_mean")
    _same(ours, verl_gspo(t["old"], t["logprobs"], t["adv"], t["mask"], 3e-4, 4e-4), t["logprobs"])


def test_cispo_is_a_stop_gradient_clipped_weight_on_log_pi() -> None:
    t = _batch(2)
    ours, metrics = _loss(t, policy_loss="cispo", eps_clip=0.2, eps_clip_high=0.28)
    ratio = torch.exp(t["logprobs"] - t["old"])
    weight = torch.clamp(ratio, 1 - 0.2, 1 + 0.28).detach()
    _same(ours, _masked_mean(-t["adv"] * weight * t["logprobs"], t["mask"]), t["logprobs"])
    assert metrics["pg_clipfrac"] > 0


@pytest.mark.parametrize("low, high", [(0.0, 2.0), (0.5, 1.5)])
def test_tis_truncate_and_mask_match_miles(low: float, high: float) -> None:
    t = _batch(3)
    base = -t["adv"] * t["logprobs"]
    tis = torch.exp(t["old"] - t["rollout"])
    for mode, weights in (
        ("truncate", torch.clamp(tis, min=low, max=high)),  # vanilla_tis_function
        ("mask", torch.where((tis >= low) & (tis <= high), tis, torch.zeros_like(tis))),
    ):  # icepop
        ours, metrics = _loss(t, use_tis=True, tis_clip=high, tis_clip_low=low, tis_mode=mode)
        _same(ours, _masked_mean(base * weights, t["mask"]), t["logprobs"])
        assert metrics["tis_clipfrac"] == pytest.approx(float(_masked_mean((weights != tis).float(), t["mask"])))


def test_tis_sequence_and_geometric_levels() -> None:
    t = _batch(4)
    log_w = (t["old"] - t["rollout"]) * t["mask"]
    n = t["mask"].sum(-1, keepdim=True)
    sequence, geometric = log_w.sum(-1, keepdim=True).exp(), (log_w.sum(-1, keepdim=True) / n).exp()
    for level, w in (("sequence", sequence), ("geometric", geometric)):
        ours, _ = _loss(t, use_tis=True, tis_clip=5.0, tis_level=level)
        expected = _masked_mean(-t["adv"] * t["logprobs"] * w.clamp(max=5.0), t["mask"])
        _same(ours, expected, t["logprobs"])


@pytest.mark.parametrize("kind", ["k1", "k2", "k3", "low_var_kl"])
def test_kl_estimators_and_kl_loss_match_miles(kind: str) -> None:
    t = _batch(5)
    expected_kl = miles_compute_approx_kl(t["logprobs"], t["ref"], kind)
    assert torch.allclose(approx_kl(t["logprobs"], t["ref"], kind), expected_kl)  # type: ignore[arg-type]
    config = ObjectiveConfig(kl_loss_coef=0.1, kl_loss_type=kind)  # type: ignore[arg-type]
    ours, metrics = policy_loss(
        logprobs=t["logprobs"], old_logprobs=t["old"], rollout_logprobs=None, advantages=t["adv"],
        loss_mask=t["mask"], config=config, ref_logprobs=t["ref"],
    )  # fmt: skip
    pg = _masked_mean(-t["adv"] * t["logprobs"], t["mask"])
    _same(ours, pg + 0.1 * _masked_mean(expected_kl, t["mask"]), t["logprobs"])  # miles: pg + kl_loss_coef * kl
    assert metrics["ref_kl"] == pytest.approx(float(_masked_mean(expected_kl.detach(), t["mask"])), rel=1e-5)


def test_entropy_bonus_is_subtracted() -> None:
    t = _batch(6)
    entropy = torch.rand_like(t["old"]).requires_grad_()
    ours, metrics = policy_loss(logprobs=t["logprobs"], old_logprobs=t["old"], rollout_logprobs=None,
                                advantages=t["adv"], loss_mask=t["mask"], config=ObjectiveConfig(entropy_coef=0.01),
                                entropy=entropy)  # fmt: skip
    expected = _masked_mean(-t["adv"] * t["logprobs"], t["mask"]) - 0.01 * _masked_mean(entropy, t["mask"])
    _same(ours, expected, entropy)
    assert metrics["entropy"] == pytest.approx(float(_masked_mean(entropy.detach(), t["mask"])))


AGG_MODES = [("token_mean", "token-mean"), ("seq_mean_token_mean", "seq-mean-token-mean"),
             ("seq_mean_token_sum", "seq-mean-token-sum")]  # fmt: skip


@pytest.mark.parametrize("ours_mode, verl_mode", AGG_MODES)
def test_aggregation_matches_verl(ours_mode: str, verl_mode: str) -> None:
    t = _batch(7)
    loss_mat = torch.randn(4, 7)
    assert torch.allclose(aggregate(loss_mat, t["mask"], ours_mode), verl_agg_loss(loss_mat, t["mask"], verl_mode))  # type: ignore[arg-type]


def test_dr_grpo_norm_is_verls_sum_over_the_constant_per_sequence() -> None:
    t = _batch(8)
    loss_mat = torch.randn(4, 7)
    verl = verl_agg_loss(loss_mat, t["mask"], "seq-mean-token-sum-norm")  # sum of sequence sums / width
    assert torch.allclose(aggregate(loss_mat, t["mask"], "seq_mean_token_sum_norm") * 4, verl)
    assert torch.allclose(aggregate(loss_mat, t["mask"], "seq_mean_token_sum_norm", max_tokens=3) * 4 * 3, verl * 7)
    assert batch_units(t["mask"], "token_mean") == 16 and batch_units(t["mask"], "seq_mean_token_sum") == 4


@pytest.mark.parametrize("cap, c_clip", [(None, None), (1.5, None), (2.0, 3.0)])
def test_decoupled_matches_areal(cap: float | None, c_clip: float | None) -> None:
    t = _batch(9)
    ours, metrics = _loss(t, policy_loss="ppo_clip", decoupled=True, behav_imp_weight_cap=cap, eps_clip_c=c_clip)
    theirs = areal_ppo_actor_loss_fn(t["logprobs"], t["old"], t["rollout"], t["adv"], 0.2, t["mask"],
                                     c_clip=c_clip, behav_imp_weight_cap=cap)  # fmt: skip
    _same(ours, theirs, t["logprobs"])
    assert metrics["behav_imp_weight"] > 0


def test_proximal_interpolation_matches_areal_loglinear() -> None:
    t = _batch(10)
    lags = torch.tensor([[0, 1, 2, 3, 4, 0, 1]] * 4)
    weights_version = 7  # the trainer holds v7: the proximal policy; this update makes v8 (AReaL's v_theta)
    ours = interpolate_proximal(t["rollout"], t["logprobs"].detach(), lags)
    theirs = areal_loglinear(t["rollout"], t["logprobs"].detach(), weights_version - lags, weights_version + 1)
    assert torch.allclose(ours, theirs)
    assert torch.equal(ours[:, 0], t["rollout"][:, 0])  # a token of the current version: the behaviour logprob


def test_reinforce_is_todays_loss() -> None:
    t = _batch(11)
    ours, metrics = _loss(t)
    tokens = t["mask"].sum()
    todays = -(t["adv"] * t["logprobs"] * t["mask"]).sum()  # actors/trainer/loss.py at cceb04a, over the tokens
    _same(ours, todays / tokens, t["logprobs"])
    assert metrics["pg_clipfrac"] == 0.0


def test_mismatch_metrics_are_zero_on_equal_logprobs_and_match_miles_ess() -> None:
    t = _batch(12)
    same = mismatch_metrics(t["old"], t["old"].clone(), t["mask"])
    assert same["train_rollout_logprob_abs_diff"] == 0.0 and abs(same["mismatch_k3_kl"]) < 1e-7
    assert same["ess_ratio"] == pytest.approx(1.0)
    diff = mismatch_metrics(t["old"], t["rollout"], t["mask"])
    w = torch.exp(t["old"] - t["rollout"]) * t["mask"]
    n = t["mask"].sum(-1)
    ess = (w.sum(-1) ** 2 / (n * (w**2).sum(-1).clamp(min=1e-8))).mean()  # miles: per sequence, averaged
    assert diff["ess_ratio"] == pytest.approx(float(ess), rel=1e-5) and diff["ess_ratio"] < 1
    log_ratio = t["old"] - t["rollout"]
    k3 = _masked_mean(log_ratio.exp() - log_ratio - 1, t["mask"])
    assert diff["mismatch_k3_kl"] == pytest.approx(float(k3), rel=1e-5)
    assert diff["train_rollout_logprob_abs_diff"] > 0.1


def test_config_refuses_contradictions_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="decoupled needs policy_loss"):
        ObjectiveConfig(decoupled=True)
    with pytest.raises(ValidationError, match="use_rollout_logprobs takes a ratio"):
        ObjectiveConfig(use_rollout_logprobs=True)
    with pytest.raises(ValidationError, match="tis_clip_low"):
        ObjectiveConfig(use_tis=True, tis_clip=1.0, tis_clip_low=1.0)
    with pytest.raises(ValidationError, match="extra"):
        ObjectiveConfig(use_tiss=True)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="no rollout_logprobs"):
        zeros = torch.zeros(1, 2)
        policy_loss(logprobs=zeros, old_logprobs=zeros, rollout_logprobs=None, advantages=zeros,
                    loss_mask=torch.ones(1, 2), config=ObjectiveConfig(use_tis=True))  # fmt: skip


def test_off_policy_guard() -> None:
    plain, tis = ObjectiveConfig(), ObjectiveConfig(use_tis=True)
    assert off_policy_problems(plain, max_staleness=0, partial_rollout=False, sampling_params={}) == []
    (problem,) = off_policy_problems(plain, max_staleness=2, partial_rollout=False, sampling_params={})
    assert "use_tis" in problem and "allow_uncorrected_off_policy" in problem
    assert off_policy_problems(plain, max_staleness=0, partial_rollout=True, sampling_params={})
    insist = ObjectiveConfig(allow_uncorrected_off_policy=True)
    assert off_policy_problems(insist, max_staleness=2, partial_rollout=True, sampling_params={}) == []
    assert off_policy_problems(tis, max_staleness=2, partial_rollout=True, sampling_params={"top_k": -1}) == []
    (problem,) = off_policy_problems(tis, max_staleness=1, partial_rollout=False, sampling_params={"top_p": 0.9})
    assert "top_p" in problem


def test_rollout_values_align_with_the_response_and_are_checked() -> None:
    from actors.trainer.batch import pack_batch
    from actors.trainer.rollout_extras import RolloutExtras, attach_extras

    tokens = [[5, 6, 7, 8, 9], [5, 6, 7]]
    mask = [[0, 0, 1, 1, 1], [0, 1, 1]]  # responses: the last 3 and the last 2 tokens
    packed = pack_batch(tokens, mask, [1.0, -1.0], vocab_size=16, max_length=8)
    extras = RolloutExtras(rollout_logprobs=[[-0.1, -0.2, -0.3], [-0.4, -0.5]], version_lags=[[2, 1, 0], [0, 0]])
    out = attach_extras(packed, extras, ObjectiveConfig(use_tis=True))
    # targets are tokens[:, 1:]: the response's logprobs sit where the mask is 1
    expected = torch.tensor([[0, -0.1, -0.2, -0.3], [-0.4, -0.5, 0, 0]])
    assert torch.allclose(out.extras["rollout_logprobs"], expected)
    assert out.extras["version_lags"].tolist() == [[0, 2, 1, 0], [0, 0, 0, 0]]
    with pytest.raises(ValueError, match=r"rollout_logprobs\[1\] has 1 values for a response of 2 trained tokens"):
        attach_extras(
            packed, RolloutExtras(rollout_logprobs=[[-0.1, -0.2, -0.3], [-0.4]]), ObjectiveConfig(use_tis=True)
        )
    with pytest.raises(ValueError, match="has no rollout_logprobs"):
        attach_extras(packed, RolloutExtras(), ObjectiveConfig(use_tis=True))
    # without a correction, malformed rollout logprobs cost only the metrics
    plain = attach_extras(packed, RolloutExtras(rollout_logprobs=[[-0.1], [-0.4]]), ObjectiveConfig())
    assert "rollout_logprobs" not in plain.extras
    with pytest.raises(ValueError, match="per-token weight versions"):
        attach_extras(packed, RolloutExtras(rollout_logprobs=extras.rollout_logprobs),
                      ObjectiveConfig(policy_loss="ppo_clip", decoupled=True, proximal="interpolate"))  # fmt: skip
