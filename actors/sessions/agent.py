"""The calculator agent: a tool-calling loop over OpenAI chat requests to one session's URL.

It drives the session server as a real agent would, so its episodes exercise every session feature the rollout uses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from actors.sessions.calculator import SYSTEM_PROMPT, tool_reply


class SessionUnavailable(ConnectionError):
    """The session server did not answer (dead, restarted or unreachable): the sample must start again elsewhere."""


class AgentRequestFailed(RuntimeError):
    """The session server refused a request (4xx): a bug in the agent or its settings, not worth retrying."""


class ContextFull(AgentRequestFailed):
    """The next turn would not fit the context (``context_length_exceeded``): the episode ends there."""


@dataclass(frozen=True)
class AgentSettings:
    """How the agent talks to the model.

    ``resample_failed_calls = k``: a reply that makes no valid call is not answered with an error; the agent asks
    again from the same point (up to k times per turn), which forks the session into a new leaf each time, as an
    agent exploring alternatives does. The session keeps every leaf, keyed ``(sample_index, occurrence)``."""

    max_turns: int = 3
    max_tokens: int = 12
    temperature: float = 1.0
    resample_failed_calls: int = 0
    request_timeout_s: float = 120.0


async def post_json(http: aiohttp.ClientSession, method: str, url: str, body: Any, timeout_s: float) -> Any:
    """``method url`` with a JSON body; SessionUnavailable when the server cannot be reached or fails (5xx)."""
    try:
        async with http.request(method, url, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            raw = await response.read()
            status = response.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise SessionUnavailable(f"{method} {url}: {type(exc).__name__}: {exc}") from None
    if status >= 500:
        raise SessionUnavailable(f"{method} {url} answered HTTP {status}: {raw[:300].decode(errors='replace')}")
    if status == 400 and b'"context_length_exceeded"' in raw:
        raise ContextFull(f"{method} {url}: {raw[:300].decode(errors='replace')}")
    if status >= 400:
        raise AgentRequestFailed(f"{method} {url} answered HTTP {status}: {raw[:500].decode(errors='replace')}")
    return json.loads(raw) if raw else None


async def run_agent(
    http: aiohttp.ClientSession, session_url: str, question: str, settings: AgentSettings, *, seed: int | None = None
) -> dict[str, int]:
    """One episode on ``question``; returns counts (requests, tool_calls, resamples, context_full: the episode
    ended because the next turn would not fit the context).

    Each turn posts the conversation so far to ``{session_url}/v1/chat/completions``; the reply is answered by the
    calculator (actors/sessions/calculator.py) as a ``tool`` message, until the model answers or ``max_turns``."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
    counts = {"requests": 0, "tool_calls": 0, "resamples": 0, "context_full": 0}
    for _turn in range(settings.max_turns):
        tries = 0
        while True:
            body: dict[str, Any] = {"model": "policy", "messages": messages, "max_tokens": settings.max_tokens,
                                    "temperature": settings.temperature, "logprobs": True}  # fmt: skip
            if seed is not None:
                body["seed"] = seed + counts["requests"]
            try:
                reply = await post_json(http, "POST", session_url + "/v1/chat/completions", body,
                                        settings.request_timeout_s)  # fmt: skip
            except ContextFull:
                counts["context_full"] += 1
                return counts
            counts["requests"] += 1
            content = str(reply["choices"][0]["message"]["content"])
            tool = tool_reply(content)
            if tool is not None and tool.startswith("error: no CALC") and tries < settings.resample_failed_calls:
                tries += 1
                counts["resamples"] += 1
                continue  # ask again from the same point: the session forks a new leaf
            break
        messages.append({"role": "assistant", "content": content})
        if tool is None:
            break
        counts["tool_calls"] += 1
        messages.append({"role": "tool", "content": tool})
    return counts
