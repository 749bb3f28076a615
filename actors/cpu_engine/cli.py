"""The CPU engine's command line (``python -m actors.cpu_engine``, :mod:`actors.cpu_engine.__main__`) and the
engine it describes: :func:`parse_args` then :func:`build_engine`. :class:`actors.cpu_engine.engine_actor.
CPUEngineActor` takes the same flags, so an engine in an actor serves exactly what the process would.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from actors.cpu_engine.engine import CPUEngine
from actors.cpu_engine.model_source import (
    DTYPE_CHOICES,
    ServedModel,
    is_hf_directory,
    load_builtin_model,
    load_hf_model,
)
from actors.cpu_engine.settings import EngineSettings
from actors.model_config import ModelConfig


def parse_args(argv: list[str] | None = None, description: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m actors.cpu_engine", description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model-config", default=None, help="built-in model: ModelConfig as JSON, or a .json file")
    parser.add_argument(
        "--model-path", "--model", dest="model_path", default=None,
        help="a Hugging Face model directory to serve, or a weights directory for the built-in model",
    )  # fmt: skip
    parser.add_argument("--tokenizer-path", default=None, help="HF tokenizer directory (default: --model-path)")
    parser.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES, help="auto: the checkpoint's dtype")
    parser.add_argument(
        "--tp-size", "--tp", "--tensor-parallel-size", dest="tp_size", type=int, default=1,
        help="tensor-parallel size: the CPU engine supports 1 only",
    )  # fmt: skip
    parser.add_argument("--seed", "--random-seed", dest="seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--context-length", type=int, default=None, help="default: max_position_embeddings")
    parser.add_argument(
        "--served-model-name", default=None, help="default: --model-path for HF directories, else 'cpu-engine'"
    )
    parser.add_argument("--weight-version", default="default")
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--pause-wait-timeout", type=float, default=300.0, help="seconds /generate waits")
    parser.add_argument(
        "--enable-cache-report", action="store_true",
        help="OpenAI usage reports prompt_tokens_details.cached_tokens (SGLang's flag)",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-requests", action="store_true", help="log every HTTP request")
    return parser.parse_args(argv)


def load_model_config(value: str | None) -> ModelConfig:
    """A ModelConfig from inline JSON or a JSON file; defaults when ``value`` is None."""
    if value is None:
        return ModelConfig()
    text = value if value.lstrip().startswith("{") else Path(value).read_text()
    return ModelConfig.model_validate(json.loads(text))


def check_args(args: argparse.Namespace) -> None:
    """Refuse flags the CPU engine cannot honour, naming the flag (exits with status 2)."""
    if args.tp_size != 1:
        raise SystemExit(
            f"--tp-size {args.tp_size}: the CPU engine runs one tensor-parallel rank; use --tp-size 1 "
            "(real SGLang shards a model across GPUs)"
        )
    hf = args.model_path is not None and is_hf_directory(args.model_path)
    if hf and args.model_config is not None:
        raise SystemExit(
            f"--model-config: {args.model_path} is a Hugging Face directory, whose config.json gives the "
            "architecture; drop --model-config"
        )
    if args.tokenizer_path is not None and not hf:
        raise SystemExit("--tokenizer-path needs --model-path of a Hugging Face directory (config.json)")


def load_served_model(args: argparse.Namespace) -> ServedModel:
    """The model of ``--model-path`` (HF directory) or of ``--model-config`` (built-in)."""
    if args.model_path is not None and is_hf_directory(args.model_path):
        return load_hf_model(args.model_path, tokenizer_path=args.tokenizer_path, dtype=args.dtype)
    config = load_model_config(args.model_config)
    return load_builtin_model(config, weights_dir=args.model_path, dtype=args.dtype)


def build_engine(args: argparse.Namespace) -> CPUEngine:
    """The engine ``args`` describe; bad flags or an unreadable model raise SystemExit naming them."""
    check_args(args)
    try:
        served = load_served_model(args)
    except (ValueError, OSError) as exc:  # UnsupportedConfig, CheckpointError, TokenizerError, WeightsError
        raise SystemExit(f"cannot serve --model-path {args.model_path}: {exc}") from exc
    config = served.model.config
    context_length = args.context_length or config.max_position_embeddings
    if context_length > config.max_position_embeddings:
        raise SystemExit(
            f"--context-length {context_length} exceeds the model's "
            f"max_position_embeddings={config.max_position_embeddings}"
        )
    settings = EngineSettings(
        model_path=served.model_path,
        tokenizer_path=served.tokenizer_path,
        served_model_name=args.served_model_name or served.default_name,
        eos_token_ids=served.eos_token_ids,
        weight_version=args.weight_version,
        random_seed=args.seed,
        context_length=context_length,
        max_batch_size=args.max_batch_size,
        pause_wait_timeout_s=args.pause_wait_timeout,
        enable_cache_report=args.enable_cache_report,
    )
    return CPUEngine(served.model, settings, served.tokenizer)
