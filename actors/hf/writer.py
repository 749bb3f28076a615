"""Writing a Hugging Face checkpoint directory: config.json, safetensors shards (+ index), tokenizer files.

The directory is assembled under a temporary name next to the target and renamed into place at the end, so a
crash never leaves a half-written checkpoint under the requested name.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from actors.hf.config import CONFIG_FILE
from actors.hf.reader import INDEX_FILE, SINGLE_FILE

# Files of a model directory that are not weights: copied from the source directory as they are.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "generation_config.json",
)
DEFAULT_SHARD_BYTES = 5 * 2**30


def shard_plan(tensors: Sequence[tuple[str, torch.Tensor]], max_shard_bytes: int) -> list[list[int]]:
    """Indices of ``tensors`` per shard, in order, each shard at most ``max_shard_bytes`` (or one tensor)."""
    shards: list[list[int]] = [[]]
    size = 0
    for index, (_, tensor) in enumerate(tensors):
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(index)
        size += nbytes
    return shards


def write_checkpoint(
    directory: str | Path,
    tensors: Sequence[tuple[str, torch.Tensor]],
    config: dict[str, Any],
    *,
    source_dir: str | Path | None = None,
    max_shard_bytes: int = DEFAULT_SHARD_BYTES,
) -> Path:
    """Write an HF directory at ``directory`` (which must not exist, or be empty); returns its path."""
    target = Path(directory)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(f"{target} exists and is not an empty directory; save to a new path")
    if max_shard_bytes <= 0:
        raise ValueError(f"max_shard_bytes={max_shard_bytes} must be positive")
    names = [name for name, _ in tensors]
    if len(set(names)) != len(names):
        raise ValueError("tensor names must be unique")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.{os.getpid()}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        _write_weights(staging, tensors, max_shard_bytes)
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        if source_dir is not None:
            for name in TOKENIZER_FILES:
                if (Path(source_dir) / name).is_file():
                    shutil.copy2(Path(source_dir) / name, staging / name)
        if target.exists():
            target.rmdir()
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _write_weights(staging: Path, tensors: Sequence[tuple[str, torch.Tensor]], max_shard_bytes: int) -> None:
    plan = shard_plan(tensors, max_shard_bytes)
    if len(plan) == 1:
        files = [SINGLE_FILE]
    else:
        files = [f"model-{i + 1:05d}-of-{len(plan):05d}.safetensors" for i in range(len(plan))]
    weight_map: dict[str, str] = {}
    for file, indices in zip(files, plan, strict=True):
        shard = {tensors[i][0]: tensors[i][1].detach().cpu().contiguous() for i in indices}
        save_file(shard, str(staging / file), metadata={"format": "pt"})
        weight_map |= dict.fromkeys(shard, file)
    if len(plan) > 1:
        total = sum(t.numel() * t.element_size() for _, t in tensors)
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (staging / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
