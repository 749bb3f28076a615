"""The session server: per-session token state in front of the router (miles' ``session_server.py``, on aiohttp)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from actors.rollout.router_client import Completion, GenerateRefused, TransientGenerateError, generate_once
from actors.sessions.chat_request import sampling_params
from actors.sessions.trajectory import SessionTrajectory, TrajectoryError, Turn
from actors.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

RouterUrl = Callable[[], Awaitable[str]]
CONTEXT_FULL = "context_length_exceeded"  # OpenAI's error code: the agent ends the episode


@dataclass(frozen=True)
class SessionLimits:
    """What one session server holds at most."""

    max_sessions: int = 4096
    max_turns: int = 64
    max_body_bytes: int = 4 * 1024 * 1024
    session_ttl_s: float = 3600.0
    request_timeout_s: float = 120.0
    retry_deadline_s: float = 120.0
    max_concurrency: int = 64
    max_context_tokens: int = 0  # prompt + max_tokens past this: 400 context_length_exceeded (0: the engine decides)


@dataclass
class _Session:
    trajectory: SessionTrajectory
    touched: float = field(default_factory=time.monotonic)


# Routes (miles' miles/router/session/sessions.py): POST /sessions {"sample_index"} -> {"session_id"};
# POST /sessions/{id}/v1/chat/completions (OpenAI chat in and out); GET /sessions/{id} (records, samples);
# DELETE /sessions/{id}; GET /health. Bodies, sessions (idle ones expire), turns per session and the context are
# bounded; a bad request is a 400 naming the field, a turn past max_context_tokens a 400 with OpenAI's
# context_length_exceeded, which ends the agent's episode.
class SessionServer:
    """The sessions of one server process and the aiohttp application serving them."""

    def __init__(self, tokenizer: Tokenizer, router_url: RouterUrl, limits: SessionLimits | None = None) -> None:
        self.tokenizer = tokenizer
        self.router_url = router_url
        self.limits = limits or SessionLimits()
        self.instance = uuid.uuid4().hex[:12]
        self.sessions: dict[str, _Session] = {}
        self._limit = asyncio.Semaphore(self.limits.max_concurrency)
        self._client: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.limits.max_body_bytes)
        app.add_routes([
            web.get("/health", self.health),
            web.post("/sessions", self.create),
            web.get("/sessions/{session_id}", self.get),
            web.delete("/sessions/{session_id}", self.delete),
            web.post("/sessions/{session_id}/v1/chat/completions", self.chat),
        ])  # fmt: skip
        app.on_cleanup.append(self._close)
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "sessions": len(self.sessions), "instance": self.instance})

    async def create(self, request: web.Request) -> web.Response:
        body = await _json_object(request, required=False)
        sample_index = body.get("sample_index")
        if sample_index is not None and (not isinstance(sample_index, int) or isinstance(sample_index, bool)):
            raise _bad(f"sample_index must be an integer, got {sample_index!r}")
        self._expire()
        if len(self.sessions) >= self.limits.max_sessions:
            raise web.HTTPServiceUnavailable(
                text=_error(f"{len(self.sessions)} sessions open, the limit (max_sessions): delete finished ones"),
                content_type="application/json",
            )
        session_id = uuid.uuid4().hex
        trajectory = SessionTrajectory(self.tokenizer, sample_index=sample_index, max_turns=self.limits.max_turns)
        self.sessions[session_id] = _Session(trajectory)
        return web.json_response({"session_id": session_id, "instance": self.instance})

    async def get(self, request: web.Request) -> web.Response:
        session_id, session = self._session(request)
        records = [
            {"occurrence": leaf.occurrence, "turns": [turn.record() for turn in leaf.turns]}
            for leaf in session.trajectory.leaves
        ]
        return web.json_response({
            "session_id": session_id, "sample_index": session.trajectory.sample_index, "instance": self.instance,
            "records": records, "samples": session.trajectory.samples(),
        })  # fmt: skip

    async def delete(self, request: web.Request) -> web.Response:
        session_id, _ = self._session(request)
        del self.sessions[session_id]
        return web.Response(status=204)

    # Planned by the session's trajectory (exact prompt tokens, never a re-tokenized conversation), sent as SGLang's
    # /generate with input_ids and return_logprob (the router client retries a dead or paused engine until its
    # deadline), and recorded only once the engine answered, so a failed request records nothing.
    async def chat(self, request: web.Request) -> web.Response:
        session_id, session = self._session(request)
        body = await _json_object(request, required=True)
        try:
            params = sampling_params(body)
            planned = session.trajectory.plan(body.get("messages"))
        except (TrajectoryError, ValueError) as exc:
            raise _bad(str(exc)) from None
        needed = len(planned.prompt_ids) + int(params.get("max_new_tokens") or 0)
        if self.limits.max_context_tokens and needed > self.limits.max_context_tokens:
            message = (f"the prompt ({len(planned.prompt_ids)} tokens) and max_tokens need {needed} tokens, over "
                       f"this session server's max_context_tokens ({self.limits.max_context_tokens})")  # fmt: skip
            raise web.HTTPBadRequest(text=_error(message, code=CONTEXT_FULL), content_type="application/json")
        generate = {"input_ids": planned.prompt_ids, "sampling_params": params, "return_logprob": True}
        try:
            completion = await self._generate(generate, f"session {session_id[:8]} turn {session.trajectory.turns}")
        except GenerateRefused as exc:
            raise _bad(str(exc)) from None
        except (TransientGenerateError, TimeoutError) as exc:
            raise web.HTTPBadGateway(text=_error(str(exc)), content_type="application/json") from None
        reply = self.tokenizer.decode(completion.output_ids, skip_special_tokens=True)
        turn = Turn(
            messages=planned.messages, reply=reply, prompt_ids=tuple(planned.prompt_ids),
            output_ids=tuple(completion.output_ids), logprobs=tuple(completion.logprobs),
            finish_reason=completion.finish_reason, weight_version=completion.weight_version, sampling_params=params,
        )  # fmt: skip
        if session_id not in self.sessions:  # deleted while the engine worked: nothing to record it in
            raise web.HTTPNotFound(text=_error(f"session {session_id} was deleted"), content_type="application/json")
        leaf = session.trajectory.commit(planned, turn)
        session.touched = time.monotonic()
        return web.json_response(_chat_completion(body, session_id, leaf.occurrence, len(leaf.turns), turn))

    async def _generate(self, body: dict[str, Any], what: str) -> Completion:
        if self._client is None or self._client.closed:
            self._client = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=self.limits.max_concurrency))
        url = (await self.router_url()).rstrip("/")
        return await generate_once(
            self._client, url, body, limit=self._limit, request_timeout_s=self.limits.request_timeout_s,
            deadline_s=self.limits.retry_deadline_s, what=what,
        )  # fmt: skip

    def _session(self, request: web.Request) -> tuple[str, _Session]:
        session_id = request.match_info["session_id"]
        session = self.sessions.get(session_id)
        if session is None:
            raise web.HTTPNotFound(
                text=_error(f"session {session_id[:64]!r} not found on session server {self.instance} (expired, "
                            "deleted, or created on another server)"),
                content_type="application/json",
            )  # fmt: skip
        return session_id, session

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.limits.session_ttl_s
        for session_id in [sid for sid, s in self.sessions.items() if s.touched < cutoff]:
            logger.warning("session %s idle for %.0fs: expired", session_id, self.limits.session_ttl_s)
            del self.sessions[session_id]

    async def _close(self, app: web.Application) -> None:
        if self._client is not None:
            await self._client.close()


def _chat_completion(body: dict[str, Any], session_id: str, occurrence: int, turns: int, turn: Turn) -> dict:
    """An OpenAI ``chat.completion`` for ``turn`` (SGLang's finish reasons, token ids and logprobs)."""
    reason = turn.finish_reason if turn.finish_reason in ("stop", "length") else "stop"
    logprobs = None
    if body.get("logprobs"):
        content = [{"token_id": t, "logprob": lp} for t, lp in zip(turn.output_ids, turn.logprobs, strict=False)]
        logprobs = {"content": content}
    choice = {"index": 0, "message": {"role": "assistant", "content": turn.reply}, "logprobs": logprobs,
              "finish_reason": reason}  # fmt: skip
    usage = {"prompt_tokens": len(turn.prompt_ids), "completion_tokens": len(turn.output_ids),
             "total_tokens": len(turn.token_ids)}  # fmt: skip
    metadata = {"session_id": session_id, "occurrence": occurrence, "turn": turns - 1,
                "weight_version": turn.weight_version}  # fmt: skip
    return {
        "id": f"chatcmpl-{session_id[:16]}-{occurrence}-{turns - 1}", "object": "chat.completion",
        "created": int(time.time()), "model": str(body.get("model") or "default"), "choices": [choice],
        "usage": usage, "metadata": metadata,
    }  # fmt: skip


async def _json_object(request: web.Request, *, required: bool) -> dict[str, Any]:
    raw = await request.read()  # bounded by client_max_size (413 past it)
    if not raw and not required:
        return {}
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise _bad(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _bad(f"the body must be a JSON object, got {type(body).__name__}")
    return body


def _error(message: str, *, code: str | None = None) -> str:
    return json.dumps({"error": {"message": message, "code": code}})


def _bad(message: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=_error(message), content_type="application/json")
