"""Checking and loading named weights (HF llama names) into the CPU engine's model.

Updates may be partial (trainers send weights in buckets), but every call is all-or-nothing: all
tensors are checked before any is copied. Like SGLang's llama loader, ``rotary_emb.inv_freq`` is
ignored, and so is ``lm_head.weight`` when the embeddings are tied.

On disk (``/update_weights_from_disk``) a model directory holds either ``*.safetensors`` files (needs
the optional ``safetensors`` package) or torch files (``*.bin``, ``*.pt``, ``*.pth``) each holding a
``{name: tensor}`` state dict saved with ``torch.save``; shards are merged, safetensors win if both exist.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import torch

from actors.cpu_engine.model import LlamaForCausalLM, empty_model, expected_shapes
from actors.model_config import ModelConfig

logger = logging.getLogger(__name__)

IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
TORCH_WEIGHT_PATTERNS = ("*.bin", "*.pt", "*.pth")


class WeightsError(ValueError):
    """Named tensors that do not fit the model (unknown name, wrong shape, missing, unreadable)."""


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
                f"unknown parameter {name!r}: the model takes HF llama names such as "
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
    config: ModelConfig, named_tensors: Iterable[tuple[str, torch.Tensor]]
) -> LlamaForCausalLM:
    """A model holding exactly the given weights (all of them must be present), e.g. a trainer's export."""
    checked = check_named_tensors(config, named_tensors, require_all=True)
    model = empty_model(config)
    load_named_tensors(model, checked)
    return model


def read_weights_dir(path: str | Path) -> list[tuple[str, torch.Tensor]]:
    """All ``(name, tensor)`` pairs stored in a model directory (see the module docstring for formats)."""
    directory = Path(path)
    if not directory.is_dir():
        raise WeightsError(f"model_path {str(directory)!r} is not a directory")
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
