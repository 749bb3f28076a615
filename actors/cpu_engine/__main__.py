"""``python -m actors.cpu_engine --host 127.0.0.1 --port N [--model-config JSON] [--seed S]``.

The model comes from ``--model-path`` (a weights directory, see actors.cpu_engine.weights) when given,
otherwise it is built from the ModelConfig's own ``seed``. ``--seed`` seeds sampling (SGLang's
``--random-seed``), not the weights. Stops cleanly on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import torch
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from actors.cpu_engine.engine import CPUEngine, EngineSettings
from actors.cpu_engine.model import LlamaForCausalLM, build_model
from actors.cpu_engine.server import create_app
from actors.cpu_engine.weights import build_model_from_named_tensors, read_weights_dir
from actors.model_config import ModelConfig

logger = logging.getLogger("actors.cpu_engine")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m actors.cpu_engine", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model-config", default=None, help="ModelConfig as JSON, or a .json file")
    parser.add_argument("--model-path", default=None, help="directory of weights to start from")
    parser.add_argument("--seed", "--random-seed", dest="seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--context-length", type=int, default=None, help="default: max_position_embeddings")
    parser.add_argument("--served-model-name", default="cpu-engine")
    parser.add_argument("--weight-version", default="default")
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--pause-wait-timeout", type=float, default=300.0, help="seconds /generate waits")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-requests", action="store_true", help="log every HTTP request")
    return parser.parse_args(argv)


class _RouterProbeFilter(logging.Filter):
    """Drop aiohttp's error records for HTTP/2 prefaces: sglang-router probes each new worker with one."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, BadHttpMessage) and "PRI" in str(exc))


def load_model_config(value: str | None) -> ModelConfig:
    """A ModelConfig from inline JSON or a JSON file; defaults when ``value`` is None."""
    if value is None:
        return ModelConfig()
    text = value if value.lstrip().startswith("{") else Path(value).read_text()
    return ModelConfig.model_validate(json.loads(text))


def build_engine_model(config: ModelConfig, model_path: str | None) -> LlamaForCausalLM:
    if model_path is None:
        return build_model(config)
    return build_model_from_named_tensors(config, read_weights_dir(model_path))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format=f"%(asctime)s %(levelname)s cpu-engine[{args.host}:{args.port}] %(name)s: %(message)s",
    )
    logging.getLogger("aiohttp.server").addFilter(_RouterProbeFilter())
    torch.set_num_threads(args.threads)
    config = load_model_config(args.model_config)
    context_length = args.context_length or config.max_position_embeddings
    if context_length > config.max_position_embeddings:
        raise SystemExit(
            f"--context-length {context_length} exceeds the model's "
            f"max_position_embeddings={config.max_position_embeddings}"
        )
    model = build_engine_model(config, args.model_path)
    settings = EngineSettings(
        model_path=args.model_path or f"random-init(seed={config.seed})",
        served_model_name=args.served_model_name,
        weight_version=args.weight_version,
        random_seed=args.seed,
        context_length=context_length,
        max_batch_size=args.max_batch_size,
        pause_wait_timeout_s=args.pause_wait_timeout,
    )
    app = create_app(CPUEngine(model, settings), host=args.host, port=args.port)
    logger.info("serving %s on http://%s:%d", settings.model_path, args.host, args.port)
    web.run_app(
        app,
        host=args.host,
        port=args.port,
        print=None,
        access_log=logging.getLogger("aiohttp.access") if args.log_requests else None,
    )


if __name__ == "__main__":
    main()
