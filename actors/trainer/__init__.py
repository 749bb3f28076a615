"""The Megatron trainer role: one :class:`Trainer` per rank, configured by an immutable TrainerConfig.

Public surface::

    Trainer(*, rank, world_size, master_addr, master_port, config)
        .train_step(tokens, loss_mask, advantages, *, rollout_logprobs=, version_lags=, temperature=)
            -> loss, grad_norm, tokens, step and the objective's metrics   (collective)
        .forward_logprobs(tokens) / .forward_logits(tokens)          (collective over TP)
        .export_hf_weights() -> [(hf_name, tensor)]                  (collective over TP)
        .save_hf_checkpoint(path) -> path                            (collective; an HF directory)
        .push_weights_to_engines(urls, weight_version)               (collective; rank 0 posts)
        .save_checkpoint(path) / .load_checkpoint(path)              (collective)
        .weights_digest() / .optimizer_digest() / .optimizer_kind / .health() / .close()
    TrainerActor: the same, as an actor (health and layout on the control lane)
    TrainerGroup.spawn(world_size=, config=): N ranks as actors; train_step shards the batch over DP ranks
    TrainerConfig (model_path: a Hugging Face directory to train), ParallelConfig, OptimizerConfig,
    ObjectiveConfig (the RL objective: actors/trainer/objectives.py)
    init_distributed(...), teardown_parallel(), dp_shard_bounds(count, dp_rank=, dp_size=)
    errors: TrainerError, BatchRejected, TrainerFailed, CheckpointError, WeightPushError
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors.lazy_exports import lazy_getattr
from actors.trainer.config import OptimizerConfig, ParallelConfig, TrainerConfig
from actors.trainer.errors import BatchRejected, CheckpointError, TrainerError, TrainerFailed, WeightPushError
from actors.trainer.objective_config import ObjectiveConfig

if TYPE_CHECKING:
    from actors.trainer.actor import TrainerActor
    from actors.trainer.batch import dp_shard_bounds
    from actors.trainer.distributed import init_distributed, teardown_parallel
    from actors.trainer.group import TrainerGroup
    from actors.trainer.trainer import Trainer

# Imported on first use: they pull in torch and megatron-core (seconds), which config users do not need.
_LAZY = {
    "Trainer": "actors.trainer.trainer",
    "TrainerActor": "actors.trainer.actor",
    "TrainerGroup": "actors.trainer.group",
    "dp_shard_bounds": "actors.trainer.batch",
    "init_distributed": "actors.trainer.distributed",
    "teardown_parallel": "actors.trainer.distributed",
}


__getattr__ = lazy_getattr(__name__, _LAZY)


__all__ = [
    "BatchRejected",
    "CheckpointError",
    "ObjectiveConfig",
    "OptimizerConfig",
    "ParallelConfig",
    "Trainer",
    "TrainerActor",
    "TrainerConfig",
    "TrainerError",
    "TrainerFailed",
    "TrainerGroup",
    "WeightPushError",
    "dp_shard_bounds",
    "init_distributed",
    "teardown_parallel",
]
