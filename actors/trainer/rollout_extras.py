"""What a rollout shard carries for the trainer besides tokens, mask and advantages, packed beside the mask; a batch
the objective cannot train on (no logprobs for a correction, no versions for an interpolated proximal policy) is
refused here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor

from actors.trainer.batch import PackedBatch, pack_tail_values
from actors.trainer.objective_config import ObjectiveConfig


@dataclass(frozen=True)
class RolloutExtras:
    """What a rollout shard carries besides tokens, mask and advantages (each per sample, response tokens only)."""

    rollout_logprobs: Sequence[Sequence[float]] | None = None
    version_lags: Sequence[Sequence[int]] | None = None  # weight versions behind the trainer's, per token
    temperature: float = 1.0


def attach_extras(packed: PackedBatch, extras: RolloutExtras, objective: ObjectiveConfig) -> PackedBatch:
    """``packed`` with the rollout's per-token values aligned to its mask; raises ValueError naming what is wrong.

    The engines' per-token logprobs and each token's weight-version lag are aligned with the response tokens
    (:func:`actors.trainer.batch.pack_tail_values`) and kept in ``PackedBatch.extras``.
    """
    if not extras.temperature > 0:
        raise ValueError(f"temperature must be positive, got {extras.temperature}")
    tensors: dict[str, Tensor] = {}
    if extras.rollout_logprobs is not None:
        try:
            tensors["rollout_logprobs"] = pack_tail_values("rollout_logprobs", extras.rollout_logprobs, packed)
        except ValueError:
            if objective.needs_rollout_logprobs:
                raise  # only metrics would be lost otherwise
    elif objective.needs_rollout_logprobs:
        raise ValueError(
            "the objective corrects with the engines' logprobs (use_tis, decoupled or use_rollout_logprobs) and "
            "the shard has no rollout_logprobs: generate with return_logprob"
        )
    if extras.version_lags is not None:
        tensors["version_lags"] = pack_tail_values("version_lags", extras.version_lags, packed)
    elif objective.decoupled and objective.proximal == "interpolate":
        raise ValueError("objective.proximal = 'interpolate' needs the shard's per-token weight versions")
    return packed.with_extras(**tensors)
