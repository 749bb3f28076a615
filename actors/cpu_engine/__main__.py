"""``python -m actors.cpu_engine --host H --port N [--model-path DIR]``: one CPU engine with SGLang's HTTP API.

Its flags are ``sglang.launch_server``'s where SGLang has them (:mod:`actors.cpu_engine.cli`)."""

from __future__ import annotations

import logging

import torch
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from actors.cpu_engine.cli import build_engine, parse_args
from actors.cpu_engine.server import create_app

logger = logging.getLogger("actors.cpu_engine")


class _RouterProbeFilter(logging.Filter):
    """Drop aiohttp's error records for HTTP/2 prefaces: sglang-router probes each new worker with one."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, BadHttpMessage) and "PRI" in str(exc))


# Without a config.json in --model-path the built-in model of --model-config is served, with --model-path's
# weights if given, else random ones from the ModelConfig's seed; --seed seeds sampling, not the weights. One engine
# is one tensor-parallel rank: --tp-size other than 1 is refused. SIGTERM and SIGINT stop it cleanly.
def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv, description=__doc__)
    logging.basicConfig(
        level=args.log_level.upper(),
        format=f"%(asctime)s %(levelname)s cpu-engine[{args.host}:{args.port}] %(name)s: %(message)s",
    )
    logging.getLogger("aiohttp.server").addFilter(_RouterProbeFilter())
    torch.set_num_threads(args.threads)
    engine = build_engine(args)
    app = create_app(engine, host=args.host, port=args.port)
    logger.info("serving %s on http://%s:%d", engine.settings.model_path, args.host, args.port)
    web.run_app(
        app,
        host=args.host,
        port=args.port,
        print=None,
        access_log=logging.getLogger("aiohttp.access") if args.log_requests else None,
    )


if __name__ == "__main__":
    main()
