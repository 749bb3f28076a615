"""The RL objective as pure functions of [batch, seq] tensors (masked): policy loss, behaviour correction, KL, entropy.

Names and formulas follow miles, verl and AReaL; ``tests/actors/test_objectives.py`` checks each against its source."""

from __future__ import annotations

import torch
from torch import Tensor

from actors.trainer.objective_config import KlType, LossAgg, ObjectiveConfig

__all__ = ["ObjectiveConfig", "aggregate", "approx_kl", "batch_units", "interpolate_proximal", "policy_loss"]


def _masked_mean(values: Tensor, mask: Tensor) -> float:
    return float((values * mask).sum() / mask.sum().clamp(min=1))


def _seq_rows(mask: Tensor) -> Tensor:
    return mask.sum(dim=-1) > 0


def aggregate(loss_mat: Tensor, mask: Tensor, mode: LossAgg, *, max_tokens: int | None = None) -> Tensor:
    """One batch's scalar loss from per-token losses (verl's ``agg_loss``; sequences without tokens do not count).

    seq_mean_token_sum_norm is the mean over sequences of ``token sum / max_tokens`` (default: the padded width),
    the Dr. GRPO constant normaliser.
    """
    summed = (loss_mat * mask).sum(dim=-1)
    if mode == "token_mean":
        return summed.sum() / mask.sum().clamp(min=1)
    rows = _seq_rows(mask)
    if mode == "seq_mean_token_mean":
        per_seq = summed / mask.sum(dim=-1).clamp(min=1)
    elif mode == "seq_mean_token_sum":
        per_seq = summed
    elif mode == "seq_mean_token_sum_norm":
        per_seq = summed / float(max_tokens or mask.shape[-1])
    else:
        raise ValueError(f"unknown loss_agg {mode!r}")
    return (per_seq * rows).sum() / rows.sum().clamp(min=1)


def batch_units(mask: Tensor, mode: LossAgg) -> int:
    """What ``mode`` averages over in this batch: masked tokens (token_mean) or sequences with tokens."""
    return int(mask.sum()) if mode == "token_mean" else int(_seq_rows(mask).sum())


def approx_kl(logprobs: Tensor, base_logprobs: Tensor, kind: KlType) -> Tensor:
    """Per-token KL(pi || pi_base) estimators (Schulman's k1, k2, k3; low_var_kl is k3 clamped to [-10, 10])."""
    log_ratio = logprobs.float() - base_logprobs.float()
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return log_ratio**2 / 2.0
    kl = torch.exp(-log_ratio) - 1 + log_ratio  # k3: r - 1 - log r with r = pi_base / pi
    return kl.clamp(min=-10, max=10) if kind == "low_var_kl" else kl


def interpolate_proximal(behave_logprobs: Tensor, current_logprobs: Tensor, version_lags: Tensor) -> Tensor:
    """The proximal policy's logprobs without a forward pass (AReaL's log-linear approximation).

    A token generated ``lag`` versions before the weights the trainer holds (the proximal policy) sits between
    the behaviour policy (version ``v - lag``) and the policy after this update (``v + 1``):
    ``log pi_prox ~ log pi_behave + alpha (log pi_theta - log pi_behave)``, ``alpha = lag / (lag + 1)``.
    """
    lags = version_lags.float()
    alpha = torch.where(lags > 0, lags / (lags + 1), torch.zeros_like(lags)).clamp(0.0, 1.0)
    return behave_logprobs + alpha * (current_logprobs - behave_logprobs)


def _ratio_losses(
    logprobs: Tensor, anchor: Tensor, advantages: Tensor, mask: Tensor, config: ObjectiveConfig
) -> tuple[Tensor, Tensor]:
    """Per-token policy-gradient losses of a ratio objective against ``anchor``, and where a clip fired."""
    log_ratio = logprobs - anchor
    low, high = 1 - config.eps_clip, 1 + config.clip_high
    if config.policy_loss == "gspo":  # sequence-level ratio, token-level gradient (verl's compute_policy_loss_gspo)
        seq = (log_ratio * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)
        log_ratio = (logprobs - logprobs.detach() + seq.detach().unsqueeze(-1)).clamp(max=10.0)
    ratio = torch.exp(log_ratio)
    if config.policy_loss == "cispo":  # clipped ratio as a stop-gradient weight on log pi
        clipped = ratio.clamp(low, high)
        return -advantages * clipped.detach() * logprobs, (clipped != ratio).float()
    losses1 = -advantages * ratio
    losses2 = -advantages * ratio.clamp(low, high)
    losses = torch.maximum(losses1, losses2)
    fired = (losses2 > losses1).float()
    if config.eps_clip_c is not None:  # dual clip: a negative advantage's loss is at most eps_clip_c * |A|
        losses = torch.where(advantages < 0, torch.minimum(losses, -config.eps_clip_c * advantages), losses)
    return losses, fired


def _tis_weights(old: Tensor, rollout: Tensor, mask: Tensor, config: ObjectiveConfig) -> tuple[Tensor, Tensor]:
    """pi_old / pi_rollout at the configured level, truncated or masked (miles' vanilla TIS and ICEPOP)."""
    log_w = (old - rollout) * mask
    if config.tis_level == "sequence":
        log_w = log_w.sum(dim=-1, keepdim=True).expand_as(old)
    elif config.tis_level == "geometric":
        log_w = (log_w.sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)).unsqueeze(-1).expand_as(old)
    raw = torch.exp(log_w)
    if config.tis_mode == "truncate":
        weights = raw.clamp(min=config.tis_clip_low, max=config.tis_clip)
    else:
        inside = (raw >= config.tis_clip_low) & (raw <= config.tis_clip)
        weights = torch.where(inside, raw, torch.zeros_like(raw))
    return weights, raw


def mismatch_metrics(old: Tensor, rollout: Tensor, mask: Tensor) -> dict[str, float]:
    """How far the engines' logprobs are from the trainer's (miles' mismatch metrics; 0 when they agree)."""
    log_ratio = old - rollout
    weights = torch.exp(log_ratio) * mask
    tokens = mask.sum(dim=-1)
    ess = weights.sum(dim=-1) ** 2 / (tokens.clamp(min=1) * (weights**2).sum(dim=-1).clamp(min=1e-8))
    rows = _seq_rows(mask)
    return {
        "train_rollout_logprob_abs_diff": _masked_mean(log_ratio.abs(), mask),
        "mismatch_k3_kl": _masked_mean(torch.exp(log_ratio) - log_ratio - 1, mask),
        "ess_ratio": float((ess * rows).sum() / rows.sum().clamp(min=1)),
    }


# One batch's loss, aggregated over that batch alone as config.loss_agg says (the trainer scales it by the
# batch's share of the DP batch, batch_units), and its metrics. Sources: miles (ppo_utils.compute_policy_loss,
# compute_approx_kl, loss.vanilla_tis_function, icepop_function), verl (core_algos.agg_loss,
# compute_policy_loss_gspo), AReaL (ppo_actor_loss_fn, the proximal interpolation). logprobs carry the gradient;
# old_logprobs are the policy before this rollout batch's first update (AReaL's proximal policy); rollout_logprobs
# are the engines' (the behaviour policy).
def policy_loss(
    *,
    logprobs: Tensor,
    old_logprobs: Tensor,
    rollout_logprobs: Tensor | None,
    advantages: Tensor,
    loss_mask: Tensor,
    config: ObjectiveConfig,
    ref_logprobs: Tensor | None = None,
    entropy: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """This batch's loss (aggregated by ``config.loss_agg``) and metrics; every tensor is [batch, seq]."""
    mask = loss_mask.float()
    old = old_logprobs.detach()
    if config.corrects_off_policy and rollout_logprobs is None:
        raise ValueError("this objective corrects with the engines' logprobs, and the batch has no rollout_logprobs")
    metrics: dict[str, float] = {}
    behave = rollout_logprobs.detach() if rollout_logprobs is not None else None
    if behave is not None:
        metrics.update(mismatch_metrics(old, behave, mask))
    if config.policy_loss == "reinforce":
        losses, fired = -advantages * logprobs, torch.zeros_like(mask)
    else:
        anchor = behave if config.use_rollout_logprobs and behave is not None else old
        losses, fired = _ratio_losses(logprobs, anchor, advantages, mask, config)
        metrics["ppo_kl"] = _masked_mean(anchor - logprobs.detach(), mask)
    metrics["pg_clipfrac"] = _masked_mean(fired, mask)
    if config.decoupled and behave is not None:  # AReaL: weight pi_prox / pi_behave, capped tokens dropped
        behav_weight = torch.exp(old - behave)
        if config.behav_imp_weight_cap is not None:
            kept = (behav_weight <= config.behav_imp_weight_cap).float()
            metrics["behav_dropped_frac"] = _masked_mean(1 - kept, mask)
            behav_weight = behav_weight * kept
        losses = losses * behav_weight
        metrics["behav_imp_weight"] = _masked_mean(behav_weight, mask)
    if config.use_tis and behave is not None:
        weights, raw = _tis_weights(old, behave, mask, config)
        losses = losses * weights
        metrics["tis"] = _masked_mean(raw, mask)
        metrics["tis_clipfrac"] = _masked_mean((weights != raw).float(), mask)
    agg = config.loss_agg
    loss = aggregate(losses, mask, agg, max_tokens=config.max_response_tokens)
    metrics["pg_loss"] = float(loss.detach())
    if entropy is not None:
        entropy_loss = aggregate(entropy, mask, agg, max_tokens=config.max_response_tokens)
        metrics["entropy"] = _masked_mean(entropy.detach(), mask)
        if config.entropy_coef > 0:
            loss = loss - config.entropy_coef * entropy_loss
    if ref_logprobs is not None:
        kl = approx_kl(logprobs, ref_logprobs.detach(), config.kl_loss_type)
        metrics["ref_kl"] = _masked_mean(kl.detach(), mask)
        if config.kl_loss_coef > 0:
            loss = loss + config.kl_loss_coef * aggregate(kl, mask, agg, max_tokens=config.max_response_tokens)
    return loss, metrics
