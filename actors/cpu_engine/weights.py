"""Checking and loading named weights (HF names) into the CPU engine's model, all-or-nothing per call."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import torch

from actors.cpu_engine.model import LlamaForCausalLM, empty_model, expected_shapes
from actors.hf.config import CONFIG_FILE, UnsupportedConfig, read_model_config
from actors.hf.reader import INDEX_FILE, SINGLE_FILE, CheckpointError, CheckpointReader
from actors.model_config import ModelConfig

logger = logging.getLogger(__name__)

IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
# Fields that may differ between the served model and a checkpoint loaded into it (the weights do not change).
NON_ARCHITECTURE_FIELDS = frozenset({"seed", "max_position_embeddings"})
TORCH_WEIGHT_PATTERNS = ("*.bin", "*.pt", "*.pth")


class WeightsError(ValueError):
    """Named tensors that do not fit the model (unknown name, wrong shape, missing, unreadable)."""


# Updates may be partial (trainers send buckets), but every call is all-or-nothing: all tensors are checked
# before any is copied. Like SGLang's llama/qwen load_weights, rotary_emb.inv_freq is ignored, and so is
# lm_head.weight when the embeddings are tied.
def check_named_tensors(
    config: ModelConfig, named_tensors: Iterable[tuple[str, torch.Tensor]], *, require_all: bool
) -> list[tuple[str, torch.Tensor]]:
    """The tensors to load, after checking names, shapes and dtypes; raises :class:`WeightsError`."""
    shapes = expected_shapes(config)
    kept: list[tuple[str, torch.Tensor]] = []
    seen: set[str] = set()
    for name, tensor in named_tensors:
        if name.endswith(IGNORED_SUFFIXES) or (config.tie_word_embeddings and name == "lm_head.weight"):
            continue
        if name not in shapes:
            raise WeightsError(
                f"unknown parameter {name!r}: the {config.architecture} model takes HF names such as "
                f"'model.layers.0.self_attn.q_proj.weight' (layers 0..{config.num_layers - 1})"
            )
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            raise WeightsError(f"parameter {name!r} must be a floating-point tensor, got {_describe(tensor)}")
        if tuple(tensor.shape) != shapes[name]:
            raise WeightsError(
                f"parameter {name!r} has shape {list(tensor.shape)}, the model expects {list(shapes[name])}"
            )
        if name in seen:
            raise WeightsError(f"parameter {name!r} is given twice")
        seen.add(name)
        kept.append((name, tensor))
    if require_all:
        missing = sorted(set(shapes) - seen)
        if missing:
            raise WeightsError(f"missing {len(missing)} parameter(s): {', '.join(missing[:5])}")
    return kept


def load_named_tensors(model: LlamaForCausalLM, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
    """Copy (a subset of) weights into ``model`` after checking them all; returns how many were loaded."""
    checked = check_named_tensors(model.config, named_tensors, require_all=False)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, tensor in checked:
            params[name].copy_(tensor.to(params[name].dtype))
    return len(checked)


def build_model_from_named_tensors(
    config: ModelConfig, named_tensors: Iterable[tuple[str, torch.Tensor]], *, dtype: torch.dtype = torch.float32
) -> LlamaForCausalLM:
    """A model holding exactly the given weights (all of them must be present), e.g. a trainer's export."""
    checked = check_named_tensors(config, named_tensors, require_all=True)
    model = empty_model(config, dtype)
    load_named_tensors(model, checked)
    return model


# A Hugging Face checkpoint (model.safetensors, or shards listed by model.safetensors.index.json), whose
# config.json, when present, must describe the architecture served (check_same_architecture). Without either file,
# other *.safetensors files, or torch files (*.bin, *.pt, *.pth) each a {name: tensor} state dict saved with
# torch.save; shards are merged, and safetensors win if both exist.
def read_weights_dir(path: str | Path) -> list[tuple[str, torch.Tensor]]:
    """All ``(name, tensor)`` pairs stored in a model directory (formats: the comment above)."""
    directory = Path(path)
    if not directory.is_dir():
        raise WeightsError(f"model_path {str(directory)!r} is not a directory")
    if (directory / INDEX_FILE).is_file() or (directory / SINGLE_FILE).is_file():
        return _read_checkpoint(directory)
    safetensor_files = sorted(directory.glob("*.safetensors"))
    if safetensor_files:
        return _read_safetensors(safetensor_files)
    torch_files = sorted(f for pattern in TORCH_WEIGHT_PATTERNS for f in directory.glob(pattern))
    if not torch_files:
        raise WeightsError(
            f"model_path {str(directory)!r} holds no weights: expected *.safetensors or "
            f"{', '.join(TORCH_WEIGHT_PATTERNS)} files"
        )
    pairs: list[tuple[str, torch.Tensor]] = []
    for file in torch_files:
        try:
            state = torch.load(file, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise WeightsError(f"cannot read {str(file)!r}: {exc}") from exc
        if not isinstance(state, dict):
            raise WeightsError(f"{str(file)!r} must hold a {{name: tensor}} dict, got {type(state).__name__}")
        pairs.extend((str(name), tensor) for name, tensor in state.items())
    logger.info("read %d tensors from %d torch file(s) in %s", len(pairs), len(torch_files), directory)
    return pairs


def check_same_architecture(config: ModelConfig, path: str | Path) -> None:
    """Refuse a directory whose config.json describes another model than ``config`` (naming the field)."""
    directory = Path(path)
    if not (directory / CONFIG_FILE).is_file():
        return
    try:
        theirs = read_model_config(directory)
    except UnsupportedConfig as exc:
        raise WeightsError(str(exc)) from exc
    for field in ModelConfig.model_fields:
        if field not in NON_ARCHITECTURE_FIELDS and getattr(theirs, field) != getattr(config, field):
            raise WeightsError(
                f"{directory / CONFIG_FILE}: {field}={getattr(theirs, field)!r} differs from the served model's "
                f"{getattr(config, field)!r}; the engine loads weights of the same architecture only"
            )


def _read_checkpoint(directory: Path) -> list[tuple[str, torch.Tensor]]:
    """Every tensor of an HF checkpoint (one file or the shards its index lists)."""
    try:
        with CheckpointReader(directory) as reader:
            pairs = [(name, reader.read(name)) for name in reader.names()]
    except CheckpointError as exc:
        raise WeightsError(str(exc)) from exc
    logger.info("read %d tensors from the checkpoint in %s", len(pairs), directory)
    return pairs


def _read_safetensors(files: list[Path]) -> list[tuple[str, torch.Tensor]]:
    try:
        from safetensors.torch import load_file
    except ImportError as exc:
        raise WeightsError(
            f"{str(files[0])!r} is a safetensors file but the 'safetensors' package is not installed"
        ) from exc
    pairs: list[tuple[str, torch.Tensor]] = []
    for file in files:
        pairs.extend(load_file(str(file), device="cpu").items())
    logger.info("read %d tensors from %d safetensors file(s)", len(pairs), len(files))
    return pairs


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor"
    return type(value).__name__
