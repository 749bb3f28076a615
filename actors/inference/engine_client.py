"""Control requests to one engine over SGLang 0.5.23's HTTP API, each with a deadline; errors name cell and URL.

Only routes real SGLang serves (``srt/entrypoints/http_server.py``), so the CPU engine and SGLang are driven alike.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import aiohttp

from actors.inference.engine_launcher import EngineKind
from actors.inference.errors import EngineRequestError
from actors.weights_wire import encode_named_tensors

logger = logging.getLogger(__name__)


class EngineClient:
    """Talks to the engine of cell ``cell_id`` at ``url`` through a shared aiohttp session."""

    def __init__(self, session: aiohttp.ClientSession, *, cell_id: str, url: str, kind: EngineKind) -> None:
        self.session = session
        self.cell_id = cell_id
        self.url = url
        self.kind = kind

    async def request(self, method: str, path: str, body: Any = None, *, timeout_s: float) -> Any:
        """The decoded JSON (or text) answer; raises EngineRequestError on no answer or a non-2xx status."""
        where = f"engine {self.cell_id} at {self.url}: {method} {path}"
        try:
            async with self.session.request(
                method, self.url + path, json=body, timeout=aiohttp.ClientTimeout(total=max(0.1, timeout_s))
            ) as reply:
                raw = await reply.read()
                status = reply.status
        except asyncio.TimeoutError as exc:
            raise EngineRequestError(f"{where}: no answer within {timeout_s:.1f}s") from exc
        except aiohttp.ClientError as exc:
            raise EngineRequestError(f"{where} failed: {type(exc).__name__}: {exc}") from exc
        decoded = _decode(raw)
        if not 200 <= status < 300 or (isinstance(decoded, dict) and decoded.get("success") is False):
            raise EngineRequestError(f"{where} answered HTTP {status}: {_message(decoded)}", status=status)
        return decoded

    async def healthy(self, *, timeout_s: float) -> bool:
        """Whether ``GET /health`` answers 200 within ``timeout_s``."""
        try:
            await self.request("GET", "/health", timeout_s=timeout_s)
            return True
        except EngineRequestError as exc:
            logger.info("%s", exc)
            return False

    async def weight_version(self, *, timeout_s: float) -> str:
        """The engine's weight version, as ``/model_info`` reports it (set with :meth:`set_weight_version`)."""
        reply = await self.request("GET", "/model_info", timeout_s=timeout_s)
        if not isinstance(reply, dict) or "weight_version" not in reply:
            raise EngineRequestError(f"engine {self.cell_id} at {self.url}: /model_info has no weight_version: {reply}")
        return str(reply["weight_version"])

    async def pause(self, mode: str, *, timeout_s: float) -> None:
        await self.request("POST", "/pause_generation", {"mode": mode}, timeout_s=timeout_s)

    async def resume(self, *, timeout_s: float) -> None:
        await self.request("POST", "/continue_generation", {}, timeout_s=timeout_s)

    async def flush_cache(self, *, timeout_s: float) -> None:
        """``POST /flush_cache``, retried until the deadline: SGLang refuses it while requests still run."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            left = deadline - asyncio.get_running_loop().time()
            try:
                await self.request("POST", "/flush_cache", timeout_s=left)
                return
            except EngineRequestError as exc:
                if exc.status is None or left <= 0.2:
                    raise
            await asyncio.sleep(0.1)

    async def memory(self, op: str, tags: list[str], *, timeout_s: float) -> None:
        """``POST /release_memory_occupation`` (op ``release``) or ``/resume_memory_occupation`` (``resume``)."""
        await self.request("POST", f"/{op}_memory_occupation", {"tags": tags}, timeout_s=timeout_s)

    async def update_from_tensors(
        self, named: list[tuple[str, Any]], version: str, *, flush: bool = True, timeout_s: float
    ) -> None:
        """CPU engine: load CPU tensors and set ``version``."""
        payload = await asyncio.to_thread(encode_named_tensors, named)
        await self.update_from_serialized(payload, version, flush=flush, timeout_s=timeout_s)

    async def update_from_serialized(self, payload: str, version: str, *, flush: bool = True, timeout_s: float) -> None:
        """CPU engine: load an ``actors.weights_wire`` payload and set ``version`` (``flush``: SGLang's flush_cache)."""
        body = {"serialized_named_tensors": [payload], "flush_cache": flush, "weight_version": version}
        # Inside /begin_weight_update .. /end_weight_update, as SGLang's scheduler requires of tensor updates.
        await self.request("POST", "/begin_weight_update", {}, timeout_s=timeout_s)
        try:
            await self.request("POST", "/update_weights_from_tensor", body, timeout_s=timeout_s)
        finally:
            await self.request("POST", "/end_weight_update", {}, timeout_s=timeout_s)

    async def update_from_disk(self, model_path: str, version: str, *, flush: bool = True, timeout_s: float) -> None:
        body = {"model_path": model_path, "flush_cache": flush, "weight_version": version}
        await self.request("POST", "/update_weights_from_disk", body, timeout_s=timeout_s)

    async def set_weight_version(self, version: str, *, timeout_s: float) -> None:
        """Make the engine report ``version`` (``/update_weight_version``, leaving requests running)."""
        body = {"new_version": version, "abort_all_requests": False}
        await self.request("POST", "/update_weight_version", body, timeout_s=timeout_s)


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw.strip() else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return raw.decode(errors="replace")


def _message(decoded: Any) -> str:
    if isinstance(decoded, dict):
        error = decoded.get("error")
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])[:500]
        if "message" in decoded:
            return str(decoded["message"])[:500]
    return str(decoded)[:500]
