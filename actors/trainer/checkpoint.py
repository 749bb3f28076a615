"""Trainer checkpoints: one file per TP rank (weights + optimizer state) and a metadata file, written last.

Loads at any DP size with the same TP size (the distributed optimizer's: the same DP size too)."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from actors.model_config import ModelConfig
from actors.trainer.distributed import ParallelLayout, all_ok
from actors.trainer.errors import CheckpointError
from actors.trainer.optimizer import TrainerOptimizer
from actors.trainer.reference import ReferenceWeights

logger = logging.getLogger(__name__)

FORMAT = "miles-actors/trainer-checkpoint/1"
METADATA_FILE = "metadata.json"


def shard_path(directory: Path, tp_rank: int) -> Path:
    return directory / f"tp{tp_rank:03d}.pt"


def optimizer_shard_path(directory: Path, layout: ParallelLayout) -> Path:
    """Where a rank's own optimizer shard goes (distributed optimizer only)."""
    return directory / f"tp{layout.tp_rank:03d}_dp{layout.dp_rank:03d}.optim.pt"


def _atomic_save(obj: object, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, target)


# metadata.json (format, step, TP size, optimizer kind, ModelConfig) appears only once every file is written;
# tp{r}.pt holds the step, the model by Megatron name, the optimizer state (None when sharded per DP rank) and the
# reference weights when kept; tp{r}_dp{d}.optim.pt each rank's shard of Megatron's distributed optimizer. DP
# replicas are identical, so only DP rank 0 of each TP rank writes weights. The optimizer kind must match on load
# (torch AdamW on CPU, Megatron's on CUDA). A collective over all ranks, on a filesystem every rank reaches.
def save(
    directory: Path,
    *,
    layout: ParallelLayout,
    model_config: ModelConfig,
    params: dict[str, torch.Tensor],
    optimizer: TrainerOptimizer,
    step: int,
    reference: ReferenceWeights | None = None,
) -> None:
    """Write this rank's share of a checkpoint; returns once the whole checkpoint is complete."""
    error = ""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if layout.rank == 0:  # a crash mid-save must not leave old metadata next to new shards
            (directory / METADATA_FILE).unlink(missing_ok=True)
    except OSError as exc:
        error = f"cannot prepare {directory}: {exc}"
    _agree(not error, error, "prepare")
    target = shard_path(directory, layout.tp_rank)
    try:
        optimizer_state = optimizer.state_dict()  # collective-free on every path
        if optimizer.dp_sharded:
            target = optimizer_shard_path(directory, layout)
            _atomic_save({"step": step, "optimizer": optimizer_state}, target)
            target = shard_path(directory, layout.tp_rank)
        if layout.dp_rank == 0:
            state = {
                "step": step,
                "model": {name: p.detach().cpu().clone() for name, p in params.items()},
                "optimizer": None if optimizer.dp_sharded else optimizer_state,
            }
            if reference is not None:
                state["reference"] = reference.tensors
            _atomic_save(state, target)
    except OSError as exc:
        error = f"cannot write {target}: {exc}"
    _agree(not error, error, "write shards")
    if layout.rank == 0:
        metadata = {
            "format": FORMAT,
            "step": step,
            "tensor_model_parallel_size": layout.tp_size,
            "data_parallel_size": layout.dp_size,
            "saved_with_world_size": layout.world_size,
            "optimizer": optimizer.kind,
            "saved_at_unix": time.time(),
            "model": model_config.model_dump(),
        }
        tmp = directory / f".{METADATA_FILE}.tmp"
        tmp.write_text(json.dumps(metadata, indent=2))
        os.replace(tmp, directory / METADATA_FILE)
    dist.barrier()
    logger.info("rank %d saved checkpoint step %d to %s", layout.rank, step, directory)


def load(
    directory: Path,
    *,
    layout: ParallelLayout,
    model_config: ModelConfig,
    params: dict[str, torch.Tensor],
    optimizer: TrainerOptimizer,
    reference: ReferenceWeights | None = None,
) -> int:
    """Restore weights, optimizer state and the reference model (when both keep one) in place; returns the step.
    A checkpoint without a reference model leaves ``reference`` at the initial weights it was built from."""
    error = ""
    state: dict[str, Any] = {}
    try:
        state = _read_checked(directory, layout, model_config, params, optimizer)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        error = f"rank {layout.rank}: {exc}"
    _agree(not error, error, "read")
    with torch.no_grad():
        for name, param in params.items():
            param.copy_(state["model"][name].to(param.device))
    optimizer.load_state_dict(state["optimizer"])
    if reference is not None and state.get("reference") is not None:
        reference.load(state["reference"])
    logger.info("rank %d loaded checkpoint step %d from %s", layout.rank, state["step"], directory)
    return int(state["step"])


def _read_checked(
    directory: Path,
    layout: ParallelLayout,
    model_config: ModelConfig,
    params: dict[str, torch.Tensor],
    optimizer: TrainerOptimizer,
) -> dict[str, Any]:
    meta_file = directory / METADATA_FILE
    if not meta_file.is_file():
        raise ValueError(f"{meta_file} is missing: not a checkpoint, or its save did not finish")
    metadata = json.loads(meta_file.read_text())
    if metadata.get("format") != FORMAT:
        raise ValueError(f"{meta_file}: format {metadata.get('format')!r}, expected {FORMAT!r}")
    if metadata["tensor_model_parallel_size"] != layout.tp_size:
        raise ValueError(
            f"checkpoint has tensor_model_parallel_size={metadata['tensor_model_parallel_size']}, this "
            f"trainer {layout.tp_size}; resharding TP is not supported"
        )
    if ModelConfig.model_validate(metadata["model"]) != model_config:
        raise ValueError(f"checkpoint model config {metadata['model']} differs from this trainer's")
    _check_optimizer_fits(metadata, layout, optimizer)
    state = torch.load(shard_path(directory, layout.tp_rank), map_location="cpu", weights_only=True)
    if optimizer.dp_sharded:
        own = torch.load(optimizer_shard_path(directory, layout), map_location="cpu", weights_only=True)
        if int(own["step"]) != int(metadata["step"]):
            raise ValueError(f"optimizer shard step {own['step']} != metadata step {metadata['step']}")
        state["optimizer"] = own["optimizer"]
    saved = state["model"]
    if set(saved) != set(params):
        raise ValueError(f"parameter names differ: {sorted(set(saved) ^ set(params))[:5]}")
    for name, param in params.items():
        if tuple(saved[name].shape) != tuple(param.shape):
            raise ValueError(f"{name}: saved shape {list(saved[name].shape)}, model {list(param.shape)}")
    if int(state["step"]) != int(metadata["step"]):
        raise ValueError(f"shard step {state['step']} != metadata step {metadata['step']}")
    return state


def _check_optimizer_fits(metadata: dict[str, Any], layout: ParallelLayout, optimizer: TrainerOptimizer) -> None:
    saved_kind = metadata.get("optimizer", "torch_adamw")  # checkpoints from before the CUDA path: torch AdamW
    if saved_kind != optimizer.kind:
        raise ValueError(
            f"checkpoint optimizer state is {saved_kind!r}, this trainer uses {optimizer.kind!r} (torch_adamw on CPU, "
            "megatron[_distributed] on CUDA, see optimizer.use_distributed_optimizer); their states do not convert"
        )
    if optimizer.dp_sharded and metadata.get("data_parallel_size") != layout.dp_size:
        raise ValueError(
            f"checkpoint has data_parallel_size={metadata.get('data_parallel_size')}, this trainer {layout.dp_size}; "
            "the distributed optimizer's state resumes at the same DP size only"
        )


def _agree(ok: bool, error: str, stage: str) -> None:
    if not all_ok(ok):
        raise CheckpointError(f"checkpoint {stage} failed: {error or 'on another rank (see its log)'}")
