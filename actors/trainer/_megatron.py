"""Every megatron-core import of this package, in one place, made on first use (not at import), with the warnings
that Transformer Engine and Apex are missing muted: the local (pure torch) layer spec used here needs neither."""

# ruff: noqa: F401 (the names _load imports are this module's attributes, through __getattr__)
from __future__ import annotations

import threading
import warnings
from typing import Any

_lock = threading.Lock()


def _load() -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*(Transformer Engine|Apex).* not installed.*")
        from megatron.core import parallel_state
        from megatron.core.distributed import (
            DistributedDataParallel,
            DistributedDataParallelConfig,
            finalize_model_grads,
        )
        from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
        from megatron.core.models.gpt import GPTModel
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.optimizer import MegatronOptimizer, get_megatron_optimizer
        from megatron.core.optimizer import OptimizerConfig as MegatronOptimizerConfig
        from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate
        from megatron.core.tensor_parallel import random as mcore_random
        from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region
        from megatron.core.transformer.dot_product_attention import DotProductAttention
        from megatron.core.transformer.spec_utils import ModuleSpec
        from megatron.core.transformer.transformer_config import TransformerConfig
    return dict(locals())


def __getattr__(name: str) -> Any:
    # Imported on first use, not with this module: megatron-core costs seconds of CPU (it imports torch's compiler),
    # and what only reads the trainer's signature and config (miles-launch's checks, a job's TrainerGroup) needs none.
    if name.startswith("_"):  # a probe (``__path__``, ``__wrapped__``) must not import megatron-core
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _lock:
        loaded = _load()
    if name not in loaded:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals().update(loaded)
    return loaded[name]
