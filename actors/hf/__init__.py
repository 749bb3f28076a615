"""Hugging Face model directories: config.json, lazily sliced safetensors, tokenizers, and writing them back."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors.hf.config import UnsupportedConfig, hf_config_dict, read_model_config
from actors.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from actors.hf.reader import CheckpointError, CheckpointReader
    from actors.hf.rope import rope_inv_freq
    from actors.hf.tokenizer import HfTokenizer, TokenizerError
    from actors.hf.writer import write_checkpoint

# Imported on first use: they pull in torch, safetensors or transformers, which config users do not need.
_LAZY = {
    "CheckpointError": "actors.hf.reader",
    "CheckpointReader": "actors.hf.reader",
    "rope_inv_freq": "actors.hf.rope",
    "HfTokenizer": "actors.hf.tokenizer",
    "TokenizerError": "actors.hf.tokenizer",
    "write_checkpoint": "actors.hf.writer",
}


__getattr__ = lazy_getattr(__name__, _LAZY)


__all__ = [
    "CheckpointError",
    "CheckpointReader",
    "HfTokenizer",
    "TokenizerError",
    "UnsupportedConfig",
    "hf_config_dict",
    "read_model_config",
    "rope_inv_freq",
    "write_checkpoint",
]
