"""The rollout executor actor: generate through the router, score, GRPO advantages, one object ref per DP rank."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from actors.dashboard.recorder import DashboardRecorder
from actors.dashboard.rollout_records import record_rollout
from actors.rollout.advantages import ESTIMATORS, Estimator, balanced_ranges, compute_advantages
from actors.rollout.prompt_plan import sampling_seed
from actors.rollout.router_client import Completion, generate_once
from actors.tokenizer import tokenizer_for
from runtime import ActorHandle, get_actor, method, metrics, put, within

logger = logging.getLogger(__name__)

#: What every request samples with when the pool gives no ``sampling_params``.
DEFAULT_SAMPLING_PARAMS: dict[str, Any] = {"temperature": 1.0, "max_new_tokens": 16}


def logprob_temperature(params: dict[str, Any]) -> float:
    """The temperature the engines' logprobs are at: the sampling temperature; 1 for greedy requests (SGLang
    reports a greedy request's logprobs at temperature 1)."""
    temperature = float(params.get("temperature", 1.0))
    return 1.0 if temperature <= 1e-6 or params.get("top_k") == 1 else temperature


def training_fields(params: dict[str, Any]) -> dict[str, Any]:
    """What every shard tells the trainer about sampling: the logprobs' temperature and the parameters."""
    return {"temperature": logprob_temperature(params), "sampling_params": dict(params)}


def load_function(path: str) -> Callable[..., Any]:
    """The function at ``"package.module:function"``."""
    module_name, _, name = path.partition(":")
    if not module_name or not name:
        raise ValueError(f"reward_fn must be 'package.module:function', got {path!r}")
    function = getattr(importlib.import_module(module_name), name, None)
    if not callable(function):
        raise ValueError(f"reward_fn {path!r}: module {module_name!r} has no function {name!r}")
    return function


_REWARD = metrics.gauge("rollout_mean_reward", "Mean reward of the last rollout")
_SAMPLES = metrics.counter("rollout_samples", "Samples generated and scored")
_GENERATED = metrics.counter("rollout_generated_tokens", "Tokens generated")
_TOKENS_PER_S = metrics.gauge("rollout_tokens_per_second", "Generation throughput of the last rollout")


# A prompt is {"text": ..., "label": ...} or {"input_ids": [...], "label": ...}. Text is encoded by the tokenizer
# of model_path (the directory the engines serve, local files only) or the built-in byte tokenizer, with special
# tokens added as SGLang's text input does. The reward function "module:function" is called as
# fn(prompt_ids, response_ids, label) -> float, and may be async.
class RolloutExecutor:
    """Turns prompts into scored, advantage-weighted training shards for ``dp_size`` trainer ranks."""

    def __init__(
        self,
        *,
        reward_fn: str,
        router_url: str | None = None,
        controller: ActorHandle | None = None,
        controller_name: str | None = None,
        sampling_params: dict[str, Any] | None = None,
        dp_size: int = 1,
        max_concurrency: int = 32,
        request_timeout_s: float = 120.0,
        retry_deadline_s: float = 300.0,
        seed: int | None = None,
        normalize_std: bool = True,
        model_path: str | None = None,
        dashboard_name: str | None = None,
        advantage_estimator: Estimator | None = None,
        whiten_advantages: bool = False,
    ) -> None:
        """``router_url``, ``controller`` (an InferenceController handle, asked for its router URL) or
        ``controller_name`` (its actor name, looked up with runtime.get_actor on first use: for hosts.toml).
        ``seed``: sample ``i`` of a call gets ``sampling_seed = seed + i`` (reproducible sampling; the
        asynchronous rollout seeds a batch's samples the same way: actors/rollout/prompt_plan.py).
        ``retry_deadline_s``: how long one sample is retried on transient failures. ``model_path``: the
        Hugging Face directory whose tokenizer encodes text prompts (default: the byte tokenizer).
        ``dashboard_name``: the dashboard collector's actor name (default: ``MILES_DASHBOARD``; none: no recording).
        ``advantage_estimator``: grpo, dr_grpo, rloo, reinforce_plus_plus or reinforce_plus_plus_baseline
        (actors/rollout/advantages.py; default: grpo, or dr_grpo with ``normalize_std=False``);
        ``whiten_advantages``: whiten them over the whole batch's tokens (every data-parallel rank's)."""
        if sum(x is not None for x in (router_url, controller, controller_name)) != 1:
            raise ValueError("give exactly one of router_url, controller or controller_name")
        if dp_size < 1 or max_concurrency < 1:
            raise ValueError(f"dp_size and max_concurrency must be at least 1, got {dp_size}, {max_concurrency}")
        self.reward_path = reward_fn
        self.reward_fn = load_function(reward_fn)
        self.router_url_ = router_url.rstrip("/") if router_url else None
        self.controller = controller
        self.controller_name = controller_name
        self.sampling_params = dict(sampling_params or DEFAULT_SAMPLING_PARAMS)
        self.dp_size = dp_size
        self.max_concurrency = max_concurrency
        self.request_timeout_s = request_timeout_s
        self.retry_deadline_s = retry_deadline_s
        self.seed = seed
        self.normalize_std = normalize_std
        self.estimator: Estimator = advantage_estimator or ("grpo" if normalize_std else "dr_grpo")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"advantage_estimator {self.estimator!r} is not one of {list(ESTIMATORS)}")
        self.whiten_advantages = whiten_advantages
        self.model_path = model_path
        self.tokenizer = tokenizer_for(model_path)
        self._session: aiohttp.ClientSession | None = None
        self._last_stats: dict[str, Any] = {}
        self._recorder = DashboardRecorder(dashboard_name, source="rollout")
        self._step = 0

    async def generate(
        self,
        prompts: list[dict[str, Any]],
        n_samples_per_prompt: int,
        sampling_params: dict[str, Any] | None = None,
        deadline_s: float | None = None,
        step: int | None = None,
    ) -> dict[str, Any]:
        """Sample ``n_samples_per_prompt`` completions per prompt, score them, and return
        ``{"shards": [ObjectRef per DP rank], "stats": {...}}``; each shard is a dict of per-sample lists
        (tokens, loss_mask, advantages, rewards, prompt_index, sample_index, rollout_logprobs, ...) plus stats and,
        for the trainer, the logprobs' ``temperature`` and the ``sampling_params``.
        ``step``: the training step the dashboard files these samples under (default: this call's number, from 1)."""
        if not prompts or n_samples_per_prompt < 1:
            raise ValueError(f"need prompts and n_samples_per_prompt >= 1, got {len(prompts)}, {n_samples_per_prompt}")
        prompt_ids = [self._prompt_ids(i, p) for i, p in enumerate(prompts)]
        params = {**self.sampling_params, **(sampling_params or {})}
        url = await self._router_url()
        started = time.monotonic()
        overall = deadline_s if deadline_s is not None else self.retry_deadline_s * 2
        limit = asyncio.Semaphore(self.max_concurrency)
        session = self._client()
        self._step = step if step is not None else self._step + 1
        latencies: dict[int, float] = {}

        async def one(index: int) -> Completion:
            prompt = index // n_samples_per_prompt
            sample_params = {**params, **sampling_seed(self.seed, prompt, n_samples_per_prompt,
                                                       index % n_samples_per_prompt)}  # fmt: skip
            body = {"input_ids": prompt_ids[prompt], "sampling_params": sample_params, "return_logprob": True}
            sent = time.monotonic()
            left = overall - (sent - started)
            completion = await generate_once(
                session, url, body, limit=limit, request_timeout_s=self.request_timeout_s,
                deadline_s=max(0.0, min(self.retry_deadline_s, left)),
                what=f"rollout sample {index % n_samples_per_prompt} of prompt {prompt}",
            )  # fmt: skip
            latencies[index] = time.monotonic() - sent
            return completion

        total = len(prompts) * n_samples_per_prompt
        tasks = [asyncio.ensure_future(one(i)) for i in range(total)]
        try:
            completions = await within(asyncio.gather(*tasks), overall + 5)
        except BaseException:
            for task in tasks:  # one sample failed for good: the others are not wanted any more
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        elapsed = time.monotonic() - started
        rewards = [
            await self._score(prompt_ids[i // n_samples_per_prompt], c.output_ids, prompts[i // n_samples_per_prompt])
            for i, c in enumerate(completions)
        ]
        advantages = self._advantages(rewards, n_samples_per_prompt, [len(c.output_ids) for c in completions])
        generated = sum(len(c.output_ids) for c in completions)
        stats = {
            "prompts": len(prompts),
            "samples": total,
            "mean_reward": sum(rewards) / total,
            "tokens_generated": generated,
            "tokens_per_s": generated / elapsed if elapsed > 0 else 0.0,
            "elapsed_s": elapsed,
            "retries": sum(c.attempts - 1 for c in completions),
            "weight_versions": sorted({str(c.weight_version) for c in completions}),
        }
        shards = []
        for rank, rows in enumerate(balanced_ranges(total, self.dp_size)):
            shard = self._shard(rows, n_samples_per_prompt, prompt_ids, completions, rewards, advantages)
            shards.append(put({**shard, **training_fields(params), "dp_rank": rank, "dp_size": self.dp_size,
                               "stats": stats, "step": self._step}))  # fmt: skip
        self._last_stats = stats
        record_rollout(self._recorder, step=self._step, prompts=prompts, prompt_ids=prompt_ids,
                       completions=completions, rewards=rewards, advantages=advantages, latencies=latencies,
                       stats=stats, tokenizer=self.tokenizer, router_url=url, group=n_samples_per_prompt)  # fmt: skip
        _REWARD.set(stats["mean_reward"])
        _SAMPLES.inc(total)
        _GENERATED.inc(generated)
        _TOKENS_PER_S.set(stats["tokens_per_s"])
        logger.info(
            "rollout: %d samples, mean reward %.3f, %.1f tokens/s", total, stats["mean_reward"], stats["tokens_per_s"]
        )
        return {"shards": shards, "stats": stats}

    @method(control_plane=True)
    def sampling_settings(self) -> dict[str, Any]:
        """The sampling parameters every request uses (the job checks them against the trainer's objective)."""
        return dict(self.sampling_params)

    @method(control_plane=True)
    def last_stats(self) -> dict[str, Any]:
        """Summary of the latest generate() call."""
        return dict(self._last_stats)

    async def close(self) -> None:
        """Close the HTTP session (it is reopened on the next generate)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ---- internals --------------------------------------------------------------------------------------

    def _advantages(self, rewards: list[float], group: int, lengths: list[int]) -> list[float]:
        return compute_advantages(rewards, group, estimator=self.estimator, response_lengths=lengths,
                                  whiten=self.whiten_advantages)  # fmt: skip

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self.max_concurrency)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def _router_url(self) -> str:
        if self.router_url_ is not None:
            return self.router_url_
        if self.controller is None:
            assert self.controller_name is not None
            self.controller = get_actor(self.controller_name)
        return str(await self.controller.router_url()).rstrip("/")

    def _prompt_ids(self, index: int, prompt: dict[str, Any]) -> list[int]:
        if "input_ids" in prompt:
            ids = [int(t) for t in prompt["input_ids"]]
        elif "text" in prompt:
            ids = self.tokenizer.encode(str(prompt["text"]))
        else:
            raise ValueError(f"prompts[{index}] needs 'input_ids' (or 'text'), has keys {sorted(prompt)}")
        if not ids:
            raise ValueError(f"prompts[{index}] is empty")
        return ids

    async def _score(self, prompt_ids: list[int], response_ids: list[int], prompt: dict[str, Any]) -> float:
        try:
            value = self.reward_fn(prompt_ids, response_ids, prompt.get("label"))
            if inspect.isawaitable(value):
                value = await value
            return float(value)
        except Exception as exc:
            raise RuntimeError(f"reward_fn {self.reward_path} failed on response {response_ids[:16]}: {exc}") from exc

    @staticmethod
    def _shard(
        rows: range,
        group: int,
        prompt_ids: list[list[int]],
        completions: list[Completion],
        rewards: list[float],
        advantages: list[float],
    ) -> dict[str, Any]:
        """Per-sample lists for the samples ``rows``; tokens are prompt + response, loss_mask 1 on the response."""
        shard: dict[str, list[Any]] = {
            key: []
            for key in ("tokens", "loss_mask", "advantages", "rewards", "prompt_index", "sample_index",
                        "response_lengths", "rollout_logprobs", "finish_reasons", "weight_versions")
        }  # fmt: skip
        for i in rows:
            prompt, completion = prompt_ids[i // group], completions[i]
            shard["tokens"].append(prompt + completion.output_ids)
            shard["loss_mask"].append([0] * len(prompt) + [1] * len(completion.output_ids))
            shard["advantages"].append(advantages[i])
            shard["rewards"].append(rewards[i])
            shard["prompt_index"].append(i // group)
            shard["sample_index"].append(i % group)
            shard["response_lengths"].append(len(completion.output_ids))
            shard["rollout_logprobs"].append(completion.logprobs)
            shard["finish_reasons"].append(completion.finish_reason)
            shard["weight_versions"].append(completion.weight_version)
        return shard
