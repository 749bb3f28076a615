"""The Megatron trainer role: one :class:`Trainer` per rank, configured by an immutable TrainerConfig.

``TrainerActor`` is a rank as an actor; ``TrainerGroup`` addresses N ranks as one."""

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
