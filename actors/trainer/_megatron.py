"""Every megatron-core import of this package, in one place, with its import-time warnings muted.

megatron-core warns at import that Transformer Engine and Apex are missing; the local (pure torch) layer
spec used here needs neither, so the warnings are noise in every rank's log.
"""

from __future__ import annotations

import warnings

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

__all__ = [
    "DistributedDataParallel",
    "DistributedDataParallelConfig",
    "DotProductAttention",
    "GPTModel",
    "MegatronOptimizer",
    "MegatronOptimizerConfig",
    "ModuleSpec",
    "RotaryEmbedding",
    "TransformerConfig",
    "finalize_model_grads",
    "get_gpt_layer_local_spec",
    "get_megatron_optimizer",
    "mcore_random",
    "parallel_state",
    "param_is_not_tensor_parallel_duplicate",
    "reduce_from_tensor_model_parallel_region",
]
