"""One ``/generate`` request through the router, retried on transient failures until its deadline."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from runtime import retry_until_deadline_async

TRANSIENT_STATUSES = frozenset({408, 429})


class TransientGenerateError(ConnectionError):
    """A failure worth retrying: no answer or a dropped connection, HTTP 5xx/429/408 (the router answers 5xx for a
    killed worker until it is marked unhealthy; a paused engine answers 503 after its wait), and a completion that
    finished as ``abort`` (generation was paused with mode=abort for a weight update)."""


class GenerateRefused(RuntimeError):
    """The router or engine refused the request (any other 4xx: the request's fault, not retried); the message
    quotes its answer."""


@dataclass
class Completion:
    """What one sample produced."""

    output_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    weight_version: str | None
    attempts: int


async def generate_once(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    *,
    limit: asyncio.Semaphore,
    request_timeout_s: float,
    deadline_s: float,
    what: str,
) -> Completion:
    """POST ``body`` to ``{url}/generate`` (at most ``limit`` at once), retrying until ``deadline_s``."""
    attempts = 0

    async def attempt() -> dict[str, Any]:
        nonlocal attempts
        attempts += 1
        async with limit:
            return await _post(session, url + "/generate", body, request_timeout_s, what)

    reply = await retry_until_deadline_async(
        attempt, deadline_s=deadline_s, what=what, retry_on=(TransientGenerateError,), max_delay_s=1.0
    )
    meta = reply.get("meta_info", {})
    logprobs = [float(entry[0]) for entry in meta.get("output_token_logprobs") or []]
    return Completion(
        output_ids=[int(t) for t in reply.get("output_ids", [])],
        logprobs=logprobs,
        finish_reason=str((meta.get("finish_reason") or {}).get("type", "unknown")),
        weight_version=meta.get("weight_version"),
        attempts=attempts,
    )


async def _post(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    timeout_s: float,
    what: str,
    *,
    abort_ok: bool = False,
) -> dict[str, Any]:
    try:
        async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            raw = await response.read()
            status = response.status
    except asyncio.TimeoutError as exc:
        raise TransientGenerateError(f"{what}: POST {url} got no answer within {timeout_s}s") from exc
    except aiohttp.ClientError as exc:
        raise TransientGenerateError(f"{what}: POST {url} failed: {type(exc).__name__}: {exc}") from exc
    text = raw.decode(errors="replace")
    if status >= 500 or status in TRANSIENT_STATUSES:
        raise TransientGenerateError(f"{what}: POST {url} answered HTTP {status}: {text[:300]}")
    if status >= 400:
        raise GenerateRefused(f"{what}: POST {url} answered HTTP {status}: {_message(text)}")
    try:
        reply = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TransientGenerateError(f"{what}: POST {url} answered non-JSON: {text[:200]!r}") from exc
    if not isinstance(reply, dict):
        raise GenerateRefused(f"{what}: POST {url} answered {type(reply).__name__}, expected one completion")
    finish = (reply.get("meta_info", {}).get("finish_reason") or {}).get("type")
    if finish == "abort" and not abort_ok:
        raise TransientGenerateError(f"{what}: the completion was aborted ({reply['meta_info']['finish_reason']})")
    return reply


async def post_generate(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], *, timeout_s: float, what: str
) -> dict[str, Any]:
    """One POST to ``{url}/generate``; an aborted completion is returned (its partial output kept), not raised."""
    return await _post(session, url + "/generate", body, timeout_s, what, abort_ok=True)


def _message(text: str) -> str:
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return text[:500]
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])[:500]
        if "message" in body:
            return str(body["message"])[:500]
    return text[:500]
