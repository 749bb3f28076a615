"""The trainer as an actor: the same Trainer, with health and layout answered on the control lane.

``health`` runs on the actor's event loop, so it answers while ``train_step`` holds the default lane for
minutes; that is how a trainer group tells a slow step from a hung or dead rank.
"""

from __future__ import annotations

from typing import Any

from actors.trainer.trainer import HealthValue, Trainer
from runtime import ObjectRef, method, metrics

_LOSS = metrics.gauge("trainer_loss", "Policy-gradient loss of the last step")
_STEPS = metrics.counter("trainer_steps", "Optimizer steps taken")
_TOKENS = metrics.counter("trainer_tokens", "Tokens trained on")


class TrainerActor(Trainer):
    """One trainer rank hosted in an actor process (construct it with keyword arguments only)."""

    def train_shard(self, shard: ObjectRef) -> dict[str, float]:
        """``train_step`` on a rollout shard fetched from its owner (a dict with tokens, loss_mask, advantages)."""
        data = shard.get(timeout=self._config.collective_timeout_s)
        result = self.train_step(data["tokens"], data["loss_mask"], data["advantages"])
        _LOSS.set(result["loss"])
        _STEPS.inc()
        _TOKENS.inc(result["tokens"])
        return result

    @method(control_plane=True)
    def health(self) -> dict[str, HealthValue]:
        return super().health()

    @method(control_plane=True)
    def parallel_layout(self) -> dict[str, Any]:
        """This rank's place: rank, world size, tp/dp rank and size."""
        layout = self.layout
        return {
            "rank": layout.rank,
            "world_size": layout.world_size,
            "tp_rank": layout.tp_rank,
            "tp_size": layout.tp_size,
            "dp_rank": layout.dp_rank,
            "dp_size": layout.dp_size,
        }
