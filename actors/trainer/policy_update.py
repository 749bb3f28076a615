"""One rollout batch's policy update on a rank: old and reference logprobs, mini-batch steps, the objective, metrics."""

from __future__ import annotations

from collections import Counter

import torch
import torch.distributed as dist
from torch import Tensor

from actors.trainer import model as gpt_model
from actors.trainer.batch import PackedBatch
from actors.trainer.distributed import ParallelLayout
from actors.trainer.objective_config import ObjectiveConfig
from actors.trainer.objectives import batch_units, interpolate_proximal, policy_loss
from actors.trainer.optimizer import TrainerOptimizer
from actors.trainer.reference import ReferenceWeights


# num_steps_per_rollout mini-batches, one optimizer step each (all ranks split alike, so steps line up). When a
# later step needs them, old_logprobs are recomputed without gradients first (with one step, the training
# forward's, detached, are the same). Reference logprobs: a no-grad forward with the initial weights swapped in.
# Each micro-batch's loss is scaled by its share of the DP mini-batch's tokens or sequences, so the summed gradient
# is the global aggregate; metrics are token-weighted over the whole DP batch.
class PolicyUpdate:
    """Runs :meth:`step` for one rank; composed into the Trainer."""

    def __init__(
        self,
        *,
        objective: ObjectiveConfig,
        layout: ParallelLayout,
        optimizer: TrainerOptimizer,
        model: torch.nn.Module,
        named: dict[str, Tensor],
        micro_batch_size: int | None,
    ) -> None:
        self.objective = objective
        self.layout = layout
        self.optimizer = optimizer
        self.model = model
        self.named = named
        self.micro_batch_size = micro_batch_size
        self.reference = ReferenceWeights(named) if objective.needs_reference else None

    def _forward(self, model: torch.nn.Module, micro: PackedBatch, temperature: float) -> tuple[Tensor, Tensor | None]:
        layout = self.layout
        return gpt_model.logprobs_and_entropy(
            model, micro.tokens.to(layout.device), temperature=temperature, with_entropy=True,  # type: ignore[arg-type]
            tp_group=layout.tp_group, tp_rank=layout.tp_rank, tp_size=layout.tp_size,
        )  # fmt: skip

    def _no_grad_logprobs(self, packed: PackedBatch, temperature: float) -> Tensor:
        """This rank's logprobs of the whole batch with the model's current weights, [b, s - 1], no gradient."""
        out = torch.zeros_like(packed.mask)
        step = self.micro_batch_size or max(packed.size, 1)
        with torch.no_grad():
            for start in range(0, packed.size, step):
                rows = packed.rows(start, min(start + step, packed.size))
                logprobs, _ = gpt_model.logprobs_and_entropy(
                    self.model, rows.tokens.to(self.layout.device), temperature=temperature,  # type: ignore[arg-type]
                    tp_group=self.layout.tp_group, tp_rank=self.layout.tp_rank, tp_size=self.layout.tp_size,
                )  # fmt: skip
                out[start : start + rows.size, : logprobs.shape[1]] = logprobs.float().cpu()
        return out

    def step(self, packed: PackedBatch, temperature: float) -> tuple[dict[str, float], int]:
        """Train on this rank's shard (collective); returns the metrics and the optimizer steps taken."""
        objective = self.objective
        interpolate = objective.decoupled and objective.proximal == "interpolate"
        if objective.num_steps_per_rollout > 1 and not interpolate:
            packed = packed.with_extras(old_logprobs=self._no_grad_logprobs(packed, temperature))
        if self.reference is not None:
            with self.reference.swapped_in(self.named):
                packed = packed.with_extras(ref_logprobs=self._no_grad_logprobs(packed, temperature))
        sums: Counter[str] = Counter()
        losses, norms, steps = [], [], 0
        for part in packed.parts(objective.num_steps_per_rollout):
            loss, grad_norm, took = self._mini_step(part, temperature, sums)
            losses.append(loss)
            norms.append(grad_norm)
            steps += took
        if "version_lags" in packed.extras:
            lags = packed.extras["version_lags"][packed.mask > 0].to(torch.int64).tolist()
            for lag, count in Counter(lags).items():
                sums[f"version_lag_{lag}_frac"] += count
            sums["_lag_tokens"] += len(lags)
        metrics = _reduce_metrics(sums, self.layout)
        metrics.update(loss=sum(losses) / len(losses), grad_norm=sum(norms) / len(norms))
        return metrics, steps

    def _mini_step(self, part: PackedBatch, temperature: float, sums: Counter[str]) -> tuple[float, float, int]:
        objective, layout = self.objective, self.layout
        counts = torch.tensor(
            [batch_units(part.mask, objective.loss_agg), part.masked_tokens], dtype=torch.float64, device=layout.device
        )
        dist.all_reduce(counts, group=layout.dp_group)
        global_units, global_tokens = float(counts[0]), float(counts[1])
        self.optimizer.zero_grad()
        local_loss = torch.zeros(1, dtype=torch.float64, device=layout.device)
        micros = part.micro_batches(self.micro_batch_size)
        for index, micro in enumerate(micros):
            extras = {name: value.to(layout.device) for name, value in micro.extras.items()}
            with self.optimizer.micro_batch(last=index == len(micros) - 1):
                logprobs, entropy = self._forward(self.optimizer.model, micro, temperature)
                old = extras.get("old_logprobs", logprobs.detach())
                rollout = extras.get("rollout_logprobs")
                if objective.decoupled and objective.proximal == "interpolate" and rollout is not None:
                    old = interpolate_proximal(rollout, logprobs.detach(), extras["version_lags"])
                loss, metrics = policy_loss(
                    logprobs=logprobs, old_logprobs=old, rollout_logprobs=rollout,
                    advantages=micro.advantages.to(layout.device), loss_mask=micro.mask.to(layout.device),
                    config=objective, ref_logprobs=extras.get("ref_logprobs"), entropy=entropy,
                )  # fmt: skip
                scale = batch_units(micro.mask, objective.loss_agg) / max(global_units, 1.0)
                (loss * scale).backward()
            local_loss += loss.detach().double() * scale
            tokens = micro.masked_tokens
            for name, value in metrics.items():
                sums[name] += value * tokens
            sums["_tokens"] += tokens
        total = float(self.optimizer.finish_gradients(local_loss).item())
        if global_tokens <= 0:
            return total, 0.0, 0
        return total, self.optimizer.step(), 1


def _reduce_metrics(sums: Counter[str], layout: ParallelLayout) -> dict[str, float]:
    """Token-weighted means over every DP rank (TP peers hold the same rows: only DP ranks are summed)."""
    gathered: list[dict[str, float] | None] = [None] * layout.dp_size
    dist.all_gather_object(gathered, dict(sums), group=layout.dp_group)
    total: Counter[str] = Counter()
    for part in gathered:
        total.update(part or {})
    tokens, lag_tokens = total.pop("_tokens", 0.0), total.pop("_lag_tokens", 0.0)
    return {
        name: value / max(lag_tokens if name.startswith("version_lag_") else tokens, 1.0)
        for name, value in sorted(total.items())
    }
