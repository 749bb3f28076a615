"""The trainer as an actor: the same Trainer, with health and layout answered on the control lane, so a trainer
group tells a slow step from a hung or dead rank.
"""

from __future__ import annotations

import time
from typing import Any

from torch import Tensor

from actors.dashboard.host_usage import host_usage
from actors.dashboard.recorder import DashboardRecorder
from actors.trainer.config import TrainerConfig
from actors.trainer.errors import BatchRejected, WeightPushError
from actors.trainer.objective_config import off_policy_problems
from actors.trainer.trainer import HealthValue, Trainer
from actors.trainer.weights_collective import push_over_refs
from runtime import ActorHandle, ObjectRef, method, metrics

_LOSS = metrics.gauge("trainer_loss", "Policy-gradient loss of the last step")
_STEPS = metrics.counter("trainer_steps", "Optimizer steps taken")
_TOKENS = metrics.counter("trainer_tokens", "Tokens trained on")


class TrainerActor(Trainer):
    """One trainer rank hosted in an actor process (construct it with keyword arguments only)."""

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        master_addr: str,
        master_port: int,
        config: TrainerConfig,
        dashboard_name: str | None = None,
    ) -> None:
        """``dashboard_name`` (or ``MILES_DASHBOARD``) names the dashboard collector: each ``train_shard`` then
        records the rank's loss, tokens and step time there (actors/dashboard), without waiting for it."""
        super().__init__(rank=rank, world_size=world_size, master_addr=master_addr, master_port=master_port,
                         config=config)  # fmt: skip
        self._recorder = DashboardRecorder(dashboard_name, source=f"trainer-{rank}")

    def train_shard(self, shard: ObjectRef) -> dict[str, float]:
        """``train_step`` on a rollout shard fetched from its owner: a dict with tokens, loss_mask, advantages and,
        from the rollout executors, rollout_logprobs, version_lags, temperature and sampling_params."""
        started = time.perf_counter()
        data = shard.get(timeout=self._config.collective_timeout_s)
        sampling = data.get("sampling_params") or {}
        problems = off_policy_problems(self._config.objective, max_staleness=0, partial_rollout=False,
                                       sampling_params=sampling)  # fmt: skip
        if problems:  # every rank sees the same parameters: all refuse before any collective
            raise BatchRejected(f"rank {self.layout.rank}: {problems[0]}")
        steps_before = self.step
        result = self.train_step(
            data["tokens"], data["loss_mask"], data["advantages"], rollout_logprobs=data.get("rollout_logprobs"),
            version_lags=data.get("version_lags"), temperature=float(data.get("temperature", 1.0)),
        )  # fmt: skip
        _LOSS.set(result["loss"])
        _STEPS.inc(self.step - steps_before)
        _TOKENS.inc(result["tokens"])
        extra = {k: v for k, v in result.items() if k not in ("loss", "tokens", "step", "step_time_s")}
        self._recorder.record("steps", {
            "step": data.get("step", self.step), "source": "trainer", "rank": self.layout.rank,
            "dp_rank": self.layout.dp_rank, "train_step": self.step, "loss": result["loss"],
            "tokens": result["tokens"], "train_s": time.perf_counter() - started, "cpu": host_usage(), **extra,
        })  # fmt: skip
        return result

    @method(control_plane=True)
    def objective(self) -> dict[str, Any]:
        """The trainer's objective settings (ObjectiveConfig as a dict), for the job's start-up checks."""
        return self._config.objective.model_dump()

    def push_weights_over_refs(
        self,
        engines: list[ActorHandle],
        weight_version: str,
        group: str | None = None,
        bucket_bytes: int | None = None,
        timeout_s: float = 120.0,
    ) -> list[dict[str, object]]:
        """Send the current weights to ``engines`` (CPUEngineActors) as collective refs over ``group``, where
        this rank and the engines are members (collective over the trainer ranks: rank 0 sends, others return
        ``[]``; see :mod:`actors.trainer.weights_collective`)."""
        with self._guard.running("push_weights_over_refs"):

            def send(pairs: list[tuple[str, Tensor]]) -> list[dict[str, object]]:
                try:
                    return push_over_refs(
                        engines, pairs, weight_version=weight_version, group=group, bucket_bytes=bucket_bytes,
                        timeout_s=timeout_s,
                    )  # fmt: skip
                except WeightPushError:
                    raise
                except Exception as exc:  # e.g. not a member of the group: every rank must hear of it
                    raise WeightPushError(
                        f"weight push over collective refs failed: {type(exc).__name__}: {exc}"
                    ) from exc

            return self._push_from_rank_zero(send)

    @method(control_plane=True)
    def health(self) -> dict[str, HealthValue]:
        """Runs on the actor's event loop, so it answers while ``train_step`` holds the default lane for minutes."""
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
