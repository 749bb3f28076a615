"""The session servers' ``[[pools]]`` table: N command workers, one session server per port (like the router pool).

The rollout finds them through the provider API; this module imports neither aiohttp nor torch."""

from __future__ import annotations

import shlex
from typing import Any

SESSION_PORTS = {"port": "worker"}


def session_server_command(
    *, controller: str | None = None, router_url: str | None = None, model_path: str | None = None,
    bind: str = "0.0.0.0", extra_args: list[str] | None = None,
) -> str:  # fmt: skip
    """The command template of one session server (``{python}``, ``{port}``)."""
    if (controller is None) == (router_url is None):
        raise ValueError("give exactly one of controller (its actor name) or router_url")
    argv = ["--host", bind]
    argv += ["--controller", controller] if controller is not None else ["--router-url", str(router_url)]
    if model_path is not None:
        argv += ["--model-path", model_path]
    argv += list(extra_args or [])
    quoted = " ".join(shlex.quote(arg).replace("{", "{{").replace("}", "}}") for arg in argv)
    return f"{{python}} -m actors.sessions --port {{port}} {quoted}"


def session_server_pool(
    pool_id: str = "sessions", *, cells: int = 1, hosts: list[str] | None = None, ready_deadline_s: float = 60.0,
    **command: Any,
) -> dict[str, Any]:  # fmt: skip
    """The ``[[pools]]`` table of ``cells`` session servers (no GPU); ``command``: session_server_command's kwargs."""
    if cells < 1:
        raise ValueError(f"cells must be at least 1, got {cells}")
    pool: dict[str, Any] = {
        "id": pool_id,
        "cells": cells,
        "worker": {
            "kind": "command",
            "command": session_server_command(**command),
            "ports": dict(SESSION_PORTS),
            "ready": {"kind": "http", "port": "port", "path": "/health", "deadline_s": ready_deadline_s},
            "gpus": 0,
        },
    }
    if hosts is not None:
        pool["hosts"] = list(hosts)
    return pool
