"""The agentic rollout actor: calculator-agent episodes through session servers, as trainer shards."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import fields
from typing import Any

import aiohttp

from actors.inference.provider_address import worker_url_host
from actors.rollout.advantages import EPS, balanced_ranges
from actors.rollout.executor import load_function
from actors.sessions.agent import AgentRequestFailed, AgentSettings, SessionUnavailable, post_json, run_agent
from launcher.launch import provider_service
from runtime import put

logger = logging.getLogger(__name__)


# Each sample runs in its own session, on the servers in turn (session_urls, or the cells of session_pool read
# through the provider API on every call). Shard rows are the sessions' own records, one per leaf, keyed
# (prompt_index, sample_index, occurrence): the engine's exact tokens, a loss mask on its tokens only, its logprobs;
# GRPO advantages over every leaf of a prompt. A server that dies takes its sessions' records with it: each of its
# samples starts again on another server (samples_retried), and after sample_attempts tries, or with no server
# left, counts in samples_lost; a sample's rows come from one session only, so nothing is recorded twice.
class AgentRollout:
    """Runs agent episodes for prompts ``{"question": ..., "label": ...}`` and returns GRPO shards."""

    def __init__(
        self,
        *,
        session_urls: list[str] | None = None,
        session_pool: str | None = None,
        provider_api: dict[str, Any] | None = None,
        reward_fn: str = "actors.sessions.calculator:calculator_reward",
        dp_size: int = 1,
        agent: AgentSettings | dict[str, Any] | None = None,
        max_concurrency: int = 16,
        sample_attempts: int = 3,
        seed: int | None = None,
    ) -> None:
        """``session_urls`` or ``session_pool`` (a launcher pool of session servers; needs ``provider_api``:
        ``plan_kwargs = ["provider_api"]``). ``reward_fn``: ``"module:function"`` called as
        ``fn(final_reply, label) -> float`` per leaf."""
        if (session_urls is None) == (session_pool is None):
            raise ValueError("give exactly one of session_urls or session_pool")
        if session_pool is not None and provider_api is None:
            raise ValueError(f"session_pool={session_pool!r} needs the launcher's provider API: "
                             "plan_kwargs = ['provider_api']")  # fmt: skip
        if dp_size < 1 or sample_attempts < 1 or max_concurrency < 1:
            raise ValueError("dp_size, sample_attempts and max_concurrency must be at least 1")
        self.session_urls = [u.rstrip("/") for u in session_urls or []]
        self.session_pool = session_pool
        self.api = provider_service.connect(provider_api) if provider_api is not None else None
        self.reward_path = reward_fn
        self.reward_fn = load_function(reward_fn)
        self.dp_size = dp_size
        self.agent = agent_settings(agent)
        self.max_concurrency = max_concurrency
        self.sample_attempts = sample_attempts
        self.seed = seed
        self._dead: set[str] = set()
        self._next = 0

    async def generate(self, prompts: list[dict[str, Any]], n_samples_per_prompt: int) -> dict[str, Any]:
        """``n_samples_per_prompt`` episodes per prompt; ``{"shards": [...], "stats": {...}}`` (module docstring)."""
        if not prompts or n_samples_per_prompt < 1:
            raise ValueError(f"need prompts and n_samples_per_prompt >= 1, got {len(prompts)}, {n_samples_per_prompt}")
        servers = await self._servers()
        started = time.monotonic()
        limit = asyncio.Semaphore(self.max_concurrency)
        counts = {"samples_retried": 0, "samples_lost": 0, "requests": 0, "tool_calls": 0, "resamples": 0,
                  "context_full": 0}  # fmt: skip
        async with aiohttp.ClientSession() as http:

            async def one(index: int) -> list[dict[str, Any]]:
                async with limit:
                    return await self._sample(http, servers, prompts, index, n_samples_per_prompt, counts)

            per_sample = await asyncio.gather(*(one(i) for i in range(len(prompts) * n_samples_per_prompt)))
        rows = [row for rows in per_sample for row in rows]
        keys = [(r["prompt_index"], r["sample_index"], r["occurrence"]) for r in rows]
        if len(set(keys)) != len(keys):
            raise RuntimeError("internal: a (prompt, sample, occurrence) key was recorded twice")
        if len(rows) < self.dp_size:
            raise RuntimeError(f"{len(rows)} rows recorded ({counts['samples_lost']} samples lost) for "
                               f"{self.dp_size} data-parallel ranks")  # fmt: skip
        for row in rows:
            row["reward"] = float(self.reward_fn(row.pop("final_reply"), prompts[row["prompt_index"]].get("label")))
        advantages = prompt_advantages([r["reward"] for r in rows], [r["prompt_index"] for r in rows])
        for row, advantage in zip(rows, advantages, strict=True):
            row["advantage"] = advantage
        stats = {
            "prompts": len(prompts), "samples": len(prompts) * n_samples_per_prompt, "leaves": len(rows),
            "mean_reward": sum(r["reward"] for r in rows) / len(rows), "elapsed_s": time.monotonic() - started,
            "tokens_generated": sum(sum(r["loss_mask"]) for r in rows), **counts,
            "weight_versions": sorted({str(v) for r in rows for v in r["weight_versions"]}),
        }  # fmt: skip
        shards = [put({**_columns(rows[part.start : part.stop]), "dp_rank": rank, "dp_size": self.dp_size,
                       "stats": stats})
                  for rank, part in enumerate(balanced_ranges(len(rows), self.dp_size))]  # fmt: skip
        logger.info("agent rollout: %d leaves of %d samples, mean reward %.3f, %d retried, %d lost",
                    len(rows), stats["samples"], stats["mean_reward"], counts["samples_retried"],
                    counts["samples_lost"])  # fmt: skip
        return {"shards": shards, "stats": stats}

    async def _sample(
        self, http: aiohttp.ClientSession, servers: list[str], prompts: list[dict[str, Any]], index: int,
        group: int, counts: dict[str, int],
    ) -> list[dict[str, Any]]:  # fmt: skip
        """One episode's rows; started again on another server if its server fails, [] once lost."""
        prompt_index, sample_index = divmod(index, group)
        timeout = self.agent.request_timeout_s
        for attempt in range(self.sample_attempts):
            live = [s for s in servers if s not in self._dead]
            if not live:
                break
            server = live[self._next % len(live)]
            self._next += 1
            try:
                created = await post_json(http, "POST", server + "/sessions", {"sample_index": sample_index}, timeout)
                url = f"{server}/sessions/{created['session_id']}"
                seed = None if self.seed is None else self.seed + 1000 * index
                episode = await run_agent(http, url, str(prompts[prompt_index]["question"]), self.agent, seed=seed)
                record = await post_json(http, "GET", url, None, timeout)
            except SessionUnavailable as exc:
                logger.warning("sample %d of prompt %d (try %d): %s", sample_index, prompt_index, attempt + 1, exc)
                if not await self._alive(http, server):
                    self._dead.add(server)
                if attempt == 0:
                    counts["samples_retried"] += 1
                continue
            except AgentRequestFailed as exc:
                raise RuntimeError(f"sample {sample_index} of prompt {prompt_index}: {exc}") from None
            try:
                await post_json(http, "DELETE", url, None, timeout)
            except SessionUnavailable:
                pass  # the records are ours already; the server's copy dies with it
            for key in ("requests", "tool_calls", "resamples", "context_full"):
                counts[key] += episode[key]
            return [{**row, "prompt_index": prompt_index} for row in record["samples"]]
        counts["samples_lost"] += 1
        logger.error("sample %d of prompt %d lost: no session server answered in %d tries",
                     sample_index, prompt_index, self.sample_attempts)  # fmt: skip
        return []

    async def _servers(self) -> list[str]:
        """The session servers: the given URLs, or the pool's live cells now; servers marked dead are probed again."""
        if self.session_pool is None:
            servers = list(self.session_urls)
        else:
            assert self.api is not None
            cells = await self.api.cells(self.session_pool)
            servers = [
                f"http://{worker_url_host(c.workers[0], self.api)}:{c.workers[0].ports['port']}"
                for c in cells if c.state == "alive"
            ]  # fmt: skip
            if not servers:
                raise RuntimeError(f"session pool {self.session_pool!r} has no live cell: {cells}")
        async with aiohttp.ClientSession() as http:
            for server in [s for s in servers if s in self._dead]:
                if await self._alive(http, server):
                    self._dead.discard(server)
        return servers

    @staticmethod
    async def _alive(http: aiohttp.ClientSession, server: str) -> bool:
        try:
            await post_json(http, "GET", server + "/health", None, 5.0)
        except (SessionUnavailable, AgentRequestFailed):
            return False
        return True


def agent_settings(value: AgentSettings | dict[str, Any] | None) -> AgentSettings:
    """``AgentSettings`` from itself, a table of its fields (hosts.toml) or None (the defaults)."""
    if value is None or isinstance(value, AgentSettings):
        return value or AgentSettings()
    known = {f.name for f in fields(AgentSettings)}
    if unknown := sorted(set(value) - known):
        raise ValueError(f"agent: unknown AgentSettings fields {unknown}; known: {sorted(known)}")
    return AgentSettings(**value)


def prompt_advantages(rewards: list[float], prompt_index: list[int]) -> list[float]:
    """GRPO advantages over rows grouped by prompt (groups may differ in size: a prompt's leaves)."""
    groups: dict[int, list[float]] = {}
    for reward, prompt in zip(rewards, prompt_index, strict=True):
        groups.setdefault(prompt, []).append(reward)
    moments = {}
    for prompt, values in groups.items():
        mean = sum(values) / len(values)
        moments[prompt] = (mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)))
    return [
        0.0 if moments[p][1] <= EPS else (r - moments[p][0]) / (moments[p][1] + EPS)
        for r, p in zip(rewards, prompt_index, strict=True)
    ]


def _columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Per-row lists as the trainer's shards hold them (tokens, loss_mask, advantages, ...)."""
    same = ("tokens", "loss_mask", "prompt_index", "sample_index", "occurrence", "rollout_logprobs", "turns")
    names = {"advantages": "advantage", "rewards": "reward", "weight_versions": "weight_versions"}
    names |= {name: name for name in same}
    return {column: [row[key] for row in rows] for column, key in names.items()}
