"""The run directory's record format: append-only JSONL streams, one JSON object per line."""

from __future__ import annotations

import json
import math
from typing import Any

# samples.jsonl: one line per sample, or per leaf of a multi-turn sample (told apart by "occurrence"); token_ids
# is prompt + response, logprobs (null on the prompt) and loss_mask run along it; an optional "messages" list
# replaces prompt and response in the conversation view; latency_s runs from the request to completion, retries
# included; "engine" names the engine where the reply does (behind the router it is null and "router" names it).
# steps.jsonl: one line per (step, source): "rollout" (reward stats, tokens/s, time) or "trainer" (per rank: loss,
# tokens, time), each with its host and the host's CPU use. Lines are written whole then flushed: a crash leaves at
# most a torn last line, never taken as data (jsonl_tail). collector.json (rewritten atomically) counts written,
# refused and dropped records. sample_record below builds the sample line.
SCHEMA_VERSION = 1
STREAMS = {"samples": "samples.jsonl", "steps": "steps.jsonl"}
STATUS_FILE = "collector.json"
MAX_LINE_BYTES = 4 * 1024 * 1024  # a record longer than this is refused by the collector and skipped by readers
SOURCES = ("rollout", "trainer")


def finite(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by ``None`` (they are not JSON), through lists and dicts."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    return value


def encode_line(record: dict[str, Any]) -> bytes:
    """One JSONL line (with its newline) for ``record``, stamped with the schema version."""
    text = json.dumps({"v": SCHEMA_VERSION, **finite(record)}, separators=(",", ":"), allow_nan=False)
    return text.encode() + b"\n"


def sample_record(
    *,
    step: int,
    sample_index: int,
    prompt_ids: list[int],
    response_ids: list[int],
    logprobs: list[float],
    texts: dict[str, Any],
    reward: float,
    occurrence: int = 0,
    **extra: Any,
) -> dict[str, Any]:
    """A samples.jsonl record. ``texts``: ``prompt``, ``response`` and ``token_texts`` (one string per token);
    ``extra``: prompt_index, group_index, advantage, weight_version, engine, router, latency_s, finish_reason..."""
    responses = list(logprobs) + [None] * (len(response_ids) - len(logprobs))
    return {
        "step": step,
        "sample_index": sample_index,
        "occurrence": occurrence,
        "prompt": texts.get("prompt", ""),
        "response": texts.get("response", ""),
        "token_ids": [*prompt_ids, *response_ids],
        "token_texts": texts.get("token_texts", []),
        "logprobs": [None] * len(prompt_ids) + responses[: len(response_ids)],
        "loss_mask": [0] * len(prompt_ids) + [1] * len(response_ids),
        "reward": reward,
        **extra,
    }


def reward_stats(rewards: list[float]) -> dict[str, float | None]:
    """Mean, std, min and max of ``rewards`` (``None`` for an empty list)."""
    if not rewards:
        return {"reward_mean": None, "reward_std": None, "reward_min": None, "reward_max": None}
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    return {"reward_mean": mean, "reward_std": std, "reward_min": min(rewards), "reward_max": max(rewards)}
