"""A Hugging Face ``config.json`` <-> :class:`ModelConfig`, read the way transformers reads it.

What our models cannot reproduce fails here, with an :class:`UnsupportedConfig` naming the config.json field.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from actors.model_config import Architecture, ModelConfig, RopeScaling

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
MAX_JSON_BYTES = 16 * 2**20  # config.json and the shard index are small; anything bigger is not one
SUPPORTED: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
SCALED_ROPE_TYPES = ("linear", "llama3")


class UnsupportedConfig(ValueError):
    """A config.json this project cannot load; the message names the field and the file."""


def read_json(path: Path, *, max_bytes: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """A JSON object from ``path``, refusing files over ``max_bytes`` before reading them."""
    size = path.stat().st_size
    if size > max_bytes:
        raise UnsupportedConfig(f"{path} is {size} bytes, over the {max_bytes}-byte limit for a JSON metadata file")
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise UnsupportedConfig(f"{path} must hold a JSON object, not {type(data).__name__}")
    return data


def read_model_config(model_path: str | Path) -> ModelConfig:
    """The :class:`ModelConfig` of the HF directory ``model_path`` (its config.json, local files only)."""
    directory = Path(model_path)
    config_file = directory / CONFIG_FILE
    if not config_file.is_file():
        raise UnsupportedConfig(f"{config_file} not found: model_path must be a Hugging Face model directory")
    raw = read_json(config_file)
    model_type = raw.get("model_type")
    if model_type not in SUPPORTED:
        raise UnsupportedConfig(
            f"{config_file}: model_type={model_type!r} is not supported (supported: {', '.join(SUPPORTED)})"
        )
    from transformers import AutoConfig  # seconds to import; only readers of HF directories pay it

    # transformers' own parser: defaults, legacy ``rope_scaling`` / ``rope_theta`` and the newer ``rope_parameters``
    # mean exactly what they mean to ``from_pretrained``.

    hf_config = AutoConfig.from_pretrained(str(directory), local_files_only=True, trust_remote_code=False)
    try:
        return model_config_from_hf(hf_config, raw)
    except UnsupportedConfig as exc:
        raise UnsupportedConfig(f"{config_file}: {exc}") from None


def model_config_from_hf(hf_config: Any, raw: dict[str, Any]) -> ModelConfig:
    """Map a transformers config (``raw``: the same config.json as a dict) onto :class:`ModelConfig`."""
    model_type: Architecture = hf_config.model_type
    _check_unsupported_fields(hf_config, raw, model_type)
    max_positions = int(hf_config.max_position_embeddings)
    window = _sliding_window(hf_config)
    if window is not None and window < max_positions:
        logger.info(
            "sliding_window=%d: sequences are limited to %d tokens (full attention up to there)", window, window
        )
        max_positions = window
    rope = dict(hf_config.rope_parameters or {})
    return ModelConfig(
        architecture=model_type,
        vocab_size=hf_config.vocab_size,
        hidden_size=hf_config.hidden_size,
        num_layers=hf_config.num_hidden_layers,
        num_attention_heads=hf_config.num_attention_heads,
        num_key_value_heads=hf_config.num_key_value_heads or hf_config.num_attention_heads,
        head_dim=getattr(hf_config, "head_dim", None) or None,
        ffn_hidden_size=hf_config.intermediate_size,
        max_position_embeddings=max_positions,
        rope_theta=rope.get("rope_theta", 10000.0),
        rope_scaling=_rope_scaling(rope),
        rms_norm_eps=hf_config.rms_norm_eps,
        tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
    )


def _check_unsupported_fields(hf_config: Any, raw: dict[str, Any], model_type: str) -> None:
    architectures = raw.get("architectures")
    if architectures is not None and architectures != [SUPPORTED[model_type]]:
        raise UnsupportedConfig(
            f"architectures={architectures!r} is not supported; expected [{SUPPORTED[model_type]!r}]"
        )
    refused = {
        "hidden_act": (getattr(hf_config, "hidden_act", "silu"), "silu"),
        "attention_bias": (bool(getattr(hf_config, "attention_bias", False)), False),
        "mlp_bias": (bool(getattr(hf_config, "mlp_bias", False)), False),
        "quantization_config": (raw.get("quantization_config"), None),
        "num_experts": (raw.get("num_experts"), None),
    }
    for field, (value, supported) in refused.items():
        if value != supported:
            raise UnsupportedConfig(f"{field}={value!r} is not supported (only {supported!r})")
    rope = hf_config.rope_parameters or {}
    if any(isinstance(value, dict) for value in rope.values()):
        raise UnsupportedConfig("rope_parameters per layer type are not supported (one RoPE for every layer)")
    rope_type = rope.get("rope_type", "default")
    if rope_type not in ("default", *SCALED_ROPE_TYPES):
        supported = ", ".join(("default", *SCALED_ROPE_TYPES))
        raise UnsupportedConfig(f"rope_scaling.rope_type={rope_type!r} is not supported (supported: {supported})")
    if rope.get("partial_rotary_factor", 1.0) != 1.0:
        raise UnsupportedConfig(f"partial_rotary_factor={rope['partial_rotary_factor']} is not supported (only 1.0)")


def _sliding_window(hf_config: Any) -> int | None:
    """The attention window if any layer uses one (mistral's sliding_window, qwen's use_sliding_window)."""
    window = getattr(hf_config, "sliding_window", None)
    layer_types = getattr(hf_config, "layer_types", None)
    if layer_types is not None and all(kind == "full_attention" for kind in layer_types):
        return None
    return int(window) if window else None


def _rope_scaling(rope: dict[str, Any]) -> RopeScaling | None:
    if rope.get("rope_type", "default") == "default":
        return None
    keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    fields = {key: rope[key] for key in keys if key in rope}
    if rope["rope_type"] == "linear":
        fields = {"factor": rope["factor"]}
    return RopeScaling(rope_type=rope["rope_type"], **fields)


def hf_config_dict(model: ModelConfig, *, dtype: str = "float32") -> dict[str, Any]:
    """A config.json for ``model`` that transformers and SGLang load (legacy rope_theta/rope_scaling keys)."""
    config: dict[str, Any] = {
        "architectures": [SUPPORTED[model.architecture]],
        "model_type": model.architecture,
        "vocab_size": model.vocab_size,
        "hidden_size": model.hidden_size,
        "intermediate_size": model.ffn_hidden_size,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads,
        "num_key_value_heads": model.num_key_value_heads,
        "head_dim": model.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": model.max_position_embeddings,
        "rms_norm_eps": model.rms_norm_eps,
        "rope_theta": model.rope_theta,
        "rope_scaling": model.rope_scaling.model_dump(exclude_none=True) if model.rope_scaling else None,
        "tie_word_embeddings": model.tie_word_embeddings,
        "dtype": dtype,
    }
    if model.architecture in ("llama", "mistral", "qwen3"):
        config["attention_bias"] = False
    if model.architecture == "mistral":
        config["sliding_window"] = None
    return config


def hf_eos_token_ids(model_path: str | Path) -> list[int]:
    """``eos_token_id`` of config.json and generation_config.json (an int or a list in each), as SGLang's
    ``ModelConfig._get_hf_eos_token_id`` (``srt/configs/model_config.py``) collects them; sorted, no repeats."""
    ids: set[int] = set()
    for name in (CONFIG_FILE, GENERATION_CONFIG_FILE):
        path = Path(model_path) / name
        if not path.is_file():
            continue
        value = read_json(path).get("eos_token_id")
        for token in value if isinstance(value, list) else [value]:
            if isinstance(token, int) and not isinstance(token, bool):
                ids.add(token)
    return sorted(ids)


def checkpoint_dtype(model_path: str | Path) -> str | None:
    """The dtype config.json declares for the weights (``dtype``, or the older ``torch_dtype``), if any."""
    raw = read_json(Path(model_path) / CONFIG_FILE)
    value = raw.get("dtype") or raw.get("torch_dtype")
    return str(value) if value else None
