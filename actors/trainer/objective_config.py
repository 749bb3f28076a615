"""The RL objective's settings: ``objective = {...}`` in the trainer's config (names follow miles' flags).

Parsed once at the edge (pydantic, ``frozen=True``, unknown fields refused); a contradictory combination is refused
with the field to change. :mod:`actors.trainer.objectives` computes the loss from it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PolicyLoss = Literal["reinforce", "ppo_clip", "gspo", "cispo"]
LossAgg = Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"]
KlType = Literal["k1", "k2", "k3", "low_var_kl"]


class ObjectiveConfig(BaseModel):
    """Policy loss, behaviour correction, aggregation, KL and entropy terms, steps per rollout batch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy_loss: PolicyLoss = Field(
        default="reinforce",
        description="reinforce: -A * log pi (on-policy only); ppo_clip: clipped ratio (miles' default); gspo: "
        "sequence-level ratio; cispo: clipped, stop-gradient ratio times log pi.",
    )
    eps_clip: float = Field(default=0.2, gt=0, description="PPO clip: the ratio is kept in [1 - eps_clip, ...].")
    eps_clip_high: float | None = Field(default=None, gt=0, description="Upper clip (clip-higher); None: eps_clip.")
    eps_clip_c: float | None = Field(
        default=None, gt=1, description="Dual clip on negative advantages: the loss is at most eps_clip_c * |A|."
    )
    use_rollout_logprobs: bool = Field(
        default=False,
        description="Bypass: the ratio is taken against the engines' logprobs (verl's bypass mode) instead of "
        "old logprobs recomputed by the trainer before the update.",
    )
    use_tis: bool = Field(default=False, description="Truncated importance sampling: pi_old / pi_rollout per token.")
    tis_clip: float = Field(default=2.0, gt=0, description="Upper bound of the TIS weight.")
    tis_clip_low: float = Field(default=0.0, ge=0, description="Lower bound of the TIS weight.")
    tis_level: Literal["token", "sequence", "geometric"] = Field(
        default="token",
        description="token: per-token weight; sequence: product over the sequence; geometric: its geometric mean.",
    )
    tis_mode: Literal["truncate", "mask"] = Field(
        default="truncate", description="truncate: clamp into the band; mask (ICEPOP/MIS): weight 0 outside it."
    )
    decoupled: bool = Field(
        default=False,
        description="AReaL's decoupled PPO: the clip is anchored at the proximal policy (the weights before this "
        "update), each token weighted by pi_prox / pi_behave (the engine's logprobs). Needs policy_loss = ppo_clip.",
    )
    proximal: Literal["recompute", "interpolate"] = Field(
        default="recompute",
        description="Decoupled: the proximal logprobs from a forward pass, or interpolated (AReaL's log-linear "
        "approximation) from the per-token weight versions the shards carry.",
    )
    behav_imp_weight_cap: float | None = Field(
        default=None, gt=0, description="Decoupled: tokens whose pi_prox / pi_behave exceeds this are dropped."
    )
    loss_agg: LossAgg = Field(
        default="token_mean",
        description="token_mean over all tokens; seq_mean_token_mean, seq_mean_token_sum; seq_mean_token_sum_norm "
        "(Dr. GRPO: each sequence's token sum over a constant, max_response_tokens).",
    )
    max_response_tokens: int | None = Field(
        default=None, gt=0, description="seq_mean_token_sum_norm's constant; None: the batch's padded width."
    )
    kl_loss_coef: float = Field(default=0.0, ge=0, description="Weight of the KL to the reference model in the loss.")
    kl_loss_type: KlType = Field(default="low_var_kl", description="KL estimator (Schulman's k1, k2, k3).")
    log_ref_kl: bool = Field(
        default=False, description="Compute the KL to the reference model as a metric even when kl_loss_coef = 0."
    )
    entropy_coef: float = Field(default=0.0, ge=0, description="Entropy bonus: loss - entropy_coef * entropy.")
    num_steps_per_rollout: int = Field(
        default=1, ge=1, description="Optimizer steps per rollout batch (mini-batches of it); >1 lets a clip fire."
    )
    allow_uncorrected_off_policy: bool = Field(
        default=False,
        description="Train on stale or partial rollouts without a behaviour correction anyway (biased gradient).",
    )

    @model_validator(mode="after")
    def _check(self) -> ObjectiveConfig:
        if self.tis_clip_low >= self.tis_clip:
            raise ValueError(f"objective.tis_clip_low={self.tis_clip_low} must be below tis_clip={self.tis_clip}")
        if self.decoupled and self.policy_loss != "ppo_clip":
            raise ValueError("objective.decoupled needs policy_loss = 'ppo_clip' (AReaL's decoupled PPO)")
        if self.decoupled and (self.use_rollout_logprobs or self.use_tis):
            raise ValueError(
                "objective.decoupled weights by pi_prox / pi_behave itself: drop use_rollout_logprobs and use_tis"
            )
        if self.use_rollout_logprobs and self.policy_loss == "reinforce":
            raise ValueError(
                "objective.use_rollout_logprobs takes a ratio against the engines' logprobs: choose policy_loss "
                "ppo_clip, gspo or cispo, or use_tis with reinforce"
            )
        return self

    @property
    def clip_high(self) -> float:
        return self.eps_clip if self.eps_clip_high is None else self.eps_clip_high

    @property
    def corrects_off_policy(self) -> bool:
        """Does the loss correct for samples drawn by other weights than the trainer's?"""
        return self.use_tis or self.decoupled or self.use_rollout_logprobs

    @property
    def needs_rollout_logprobs(self) -> bool:
        return self.corrects_off_policy

    @property
    def needs_reference(self) -> bool:
        return self.kl_loss_coef > 0 or self.log_ref_kl


def off_policy_problems(
    objective: ObjectiveConfig, *, max_staleness: int, partial_rollout: bool, sampling_params: dict[str, object]
) -> list[str]:
    """Why this run would train on a biased gradient or an inexact ratio; empty when it is fine."""
    problems: list[str] = []
    off_policy = max_staleness >= 1 or partial_rollout
    if off_policy and not objective.corrects_off_policy and not objective.allow_uncorrected_off_policy:
        what = f"max_staleness = {max_staleness}" if max_staleness >= 1 else "partial rollouts"
        problems.append(
            f"{what} trains on samples drawn by older weights, and the trainer's objective has no behaviour "
            "correction: set objective.use_tis = true (with policy_loss = 'ppo_clip' or 'reinforce'), "
            "objective.decoupled = true (policy_loss = 'ppo_clip'), or objective.use_rollout_logprobs = true; "
            "or objective.allow_uncorrected_off_policy = true to train on a biased gradient anyway"
        )
    if objective.corrects_off_policy:
        for key, full in (("top_p", 1.0), ("top_k", -1), ("min_p", 0.0)):
            value = sampling_params.get(key)
            if value is not None and float(value) != full and not (key == "top_k" and int(value) <= 0):  # type: ignore[arg-type]
                problems.append(
                    f"sampling_params.{key} = {value} truncates the engines' distribution, so their logprobs are "
                    f"not the policy the trainer computes and the correction is not exact: sample with {key} = {full}"
                )
    return problems
