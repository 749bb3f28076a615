"""``python -m actors.sessions``: one session server (actors/sessions/server.py), as a launcher command worker.

``--controller``: its router URL is asked again for every request, so a restarted router (new ports) is followed.
``--model-path``: the Hugging Face directory the engines serve; without it, the built-in model's byte tokenizer.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from actors.sessions.server import SessionLimits, SessionServer
from actors.tokenizer import tokenizer_for

logger = logging.getLogger("actors.sessions")


def _router_url(args: argparse.Namespace) -> Callable[[], Awaitable[str]]:
    if args.router_url:
        url = args.router_url

        async def fixed() -> str:
            return url

        return fixed
    name = args.controller

    # The InferenceController actor, found through the launch's name service (MILES_NAME_SERVICE).
    async def from_controller() -> str:
        from runtime import get_actor  # only a launch's session server needs the runtime

        def ask() -> str:
            return str(get_actor(name).router_url().result(timeout=30))

        return await asyncio.to_thread(ask)

    return from_controller


def main(argv: list[str] | None = None) -> None:
    """Serve one session server until stopped; actors/sessions/pool.py renders its command line."""
    parser = argparse.ArgumentParser(prog="python -m actors.sessions", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--router-url", default=None, help="the router (or an engine) to send /generate to")
    where.add_argument("--controller", default=None, help="the InferenceController's actor name: ask its router_url")
    parser.add_argument("--model-path", default=None, help="HF directory: its tokenizer and chat template")
    defaults = SessionLimits()
    for name in ("max_sessions", "max_turns", "max_body_bytes", "max_concurrency", "max_context_tokens"):
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    for name in ("session_ttl_s", "request_timeout_s", "retry_deadline_s"):
        parser.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(defaults, name))
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    limits = SessionLimits(**{name: getattr(args, name) for name in SessionLimits.__dataclass_fields__})
    server = SessionServer(tokenizer_for(args.model_path), _router_url(args), limits)
    logger.info("session server %s on %s:%d", server.instance, args.host, args.port)
    web.run_app(server.app(), host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
