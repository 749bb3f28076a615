"""The trainer's Hugging Face checkpoints: loading ``TrainerConfig.model_path`` and saving HF directories.

Loading is local to each rank (its own slices), then every rank agrees that every rank succeeded, so a
missing or broken file fails the whole group at construction instead of hanging the first collective.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from actors.hf.config import CONFIG_FILE, UnsupportedConfig, hf_config_dict, read_json
from actors.hf.reader import CheckpointError as HfCheckpointError
from actors.hf.reader import CheckpointReader
from actors.hf.writer import write_checkpoint
from actors.model_config import ModelConfig
from actors.trainer.config import TrainerConfig
from actors.trainer.distributed import ParallelLayout, all_ok
from actors.trainer.errors import CheckpointError
from actors.trainer.hf_import import expected_hf_shapes, load_hf_weights

logger = logging.getLogger(__name__)


def load(
    model_path: str, params: dict[str, Tensor], model: ModelConfig, layout: ParallelLayout
) -> dict[str, torch.dtype]:
    """Fill ``params`` with this rank's slices of ``model_path`` (collective); returns the stored dtypes."""
    started = time.perf_counter()
    error = ""
    dtypes: dict[str, torch.dtype] = {}
    try:
        with CheckpointReader(model_path) as reader:
            load_hf_weights(params, model, reader, tp_rank=layout.tp_rank, tp_size=layout.tp_size)
            dtypes = {name: reader.dtype(name) for name in expected_hf_shapes(model)}
    except (HfCheckpointError, OSError, RuntimeError) as exc:
        error = f"rank {layout.rank}: loading {model_path} failed: {exc}"
    if not all_ok(not error):
        raise CheckpointError(error or f"rank {layout.rank}: another rank failed to load {model_path} (see its log)")
    logger.info("rank %d loaded %s in %.2fs", layout.rank, model_path, time.perf_counter() - started)
    return dtypes


def save(
    path: str,
    pairs: Sequence[tuple[str, Tensor]],
    config: TrainerConfig,
    dtypes: dict[str, torch.dtype],
    *,
    max_shard_bytes: int,
) -> None:
    """Write ``pairs`` (the full export) as an HF directory: in the source dtypes, without a tied lm_head."""
    model = config.model
    if config.model_path is not None:
        try:
            hf_config = read_json(Path(config.model_path) / CONFIG_FILE)
        except UnsupportedConfig as exc:
            raise ValueError(str(exc)) from exc
    else:
        hf_config = hf_config_dict(model)
    tensors = [
        (name, tensor.to(dtypes.get(name, torch.float32)))
        for name, tensor in pairs
        if not (name == "lm_head.weight" and model.tie_word_embeddings)
    ]
    write_checkpoint(path, tensors, hf_config, source_dir=config.model_path, max_shard_bytes=max_shard_bytes)
    logger.info("wrote HF checkpoint %s (%d tensors)", path, len(tensors))
