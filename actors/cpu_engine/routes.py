"""What every route module of the CPU engine's HTTP API shares: the app keys and the JSON body reader."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from actors.cpu_engine.engine import CPUEngine
from actors.cpu_engine.protocol import RequestError

ENGINE = web.AppKey("engine", CPUEngine)
ADDRESS = web.AppKey("address", tuple)


async def json_body(request: web.Request) -> Any:
    """The JSON body, ``{}`` when there is none; a 400 naming the problem when it is not JSON."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(f"body is not valid JSON: {exc}") from exc
