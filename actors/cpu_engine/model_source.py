"""What one CPU engine serves: a Hugging Face model directory (as SGLang's ``--model-path``) or the built-in model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from actors.cpu_engine.model import LlamaForCausalLM, build_model, cast_parameters
from actors.cpu_engine.weights import build_model_from_named_tensors, read_weights_dir
from actors.hf.config import CONFIG_FILE, checkpoint_dtype, hf_eos_token_ids, read_model_config
from actors.model_config import ModelConfig
from actors.tokenizer import BYTE_TOKENIZER, Tokenizer, tokenizer_for

TORCH_DTYPES = {
    "half": torch.float16,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float": torch.float32,
    "float32": torch.float32,
}
DTYPE_CHOICES = ("auto", *TORCH_DTYPES)


@dataclass(frozen=True)
class ServedModel:
    """A loaded model and what the engine reports and needs with it."""

    model: LlamaForCausalLM
    tokenizer: Tokenizer
    model_path: str
    tokenizer_path: str
    default_name: str  # the served model name unless one is given
    eos_token_ids: tuple[int, ...] = ()


def is_hf_directory(path: str | Path) -> bool:
    """Whether ``path`` is a Hugging Face model directory (it has a config.json)."""
    return (Path(path) / CONFIG_FILE).is_file()


# As SGLang's --dtype (srt/configs/model_config.py _get_and_verify_dtype), except that "auto" keeps a float32
# checkpoint in float32: SGLang would pick float16 on a GPU, which is slow and lossy on a CPU.
def resolve_dtype(dtype: str, declared: str | None) -> torch.dtype:
    """The torch dtype for ``--dtype`` (``auto``: the checkpoint's declared dtype, float32 if none)."""
    name = dtype.lower()
    if name == "auto":
        return TORCH_DTYPES.get(declared or "float32", torch.float32)
    if name not in TORCH_DTYPES:
        raise ValueError(f"--dtype {dtype!r} is not one of {', '.join(DTYPE_CHOICES)}")
    return TORCH_DTYPES[name]


# A Hugging Face directory brings everything: the architecture (config.json), the weights (safetensors, sharded
# or not), its tokenizer and chat template (local files only), and the ids that end a generation (eos_token_id of
# config.json and generation_config.json, as SGLang's hf_eos_token_id).
def load_hf_model(model_path: str, *, tokenizer_path: str | None = None, dtype: str = "auto") -> ServedModel:
    """The model, tokenizer and stop ids of the HF directory ``model_path`` (local files only)."""
    config = read_model_config(model_path)
    torch_dtype = resolve_dtype(dtype, checkpoint_dtype(model_path))
    model = build_model_from_named_tensors(config, read_weights_dir(model_path), dtype=torch_dtype)
    tokenizer_dir = tokenizer_path or model_path
    return ServedModel(
        model=model,
        tokenizer=tokenizer_for(tokenizer_dir),
        model_path=model_path,
        tokenizer_path=tokenizer_dir,
        default_name=model_path,  # SGLang: served_model_name defaults to model_path
        eos_token_ids=tuple(hf_eos_token_ids(model_path)),
    )


def load_builtin_model(config: ModelConfig, *, weights_dir: str | None = None, dtype: str = "auto") -> ServedModel:
    """The built-in model of ``config``: random weights from its seed, or those of ``weights_dir``."""
    torch_dtype = resolve_dtype(dtype, None)
    if weights_dir is None:
        model = cast_parameters(build_model(config), torch_dtype)
    else:
        model = build_model_from_named_tensors(config, read_weights_dir(weights_dir), dtype=torch_dtype)
    return ServedModel(
        model=model,
        tokenizer=BYTE_TOKENIZER,
        model_path=weights_dir or f"random-init(seed={config.seed})",
        tokenizer_path="actors.tokenizer (bytes)",
        default_name="cpu-engine",
    )
