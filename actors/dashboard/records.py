"""The run directory's record format: append-only JSONL streams, one JSON object per line.

``RUN_DIR/samples.jsonl``: one line per sample (a multi-leaf sample, e.g. a multi-turn session trained as several
rows, has one line per leaf, told apart by ``occurrence``)::

    {"v": 1, "step": 3, "sample_index": 17, "occurrence": 0, "prompt_index": 2, "group_index": 1,
     "prompt": "copy abcd =", "response": "abcd", "token_ids": [...], "token_texts": [...],
     "logprobs": [null, ..., -0.41, ...], "loss_mask": [0, ..., 1, ...], "reward": 0.75, "advantage": 0.3,
     "weight_version": "v2", "engine": null, "router": "http://...", "latency_s": 0.08, "finish_reason": "length",
     "time": 1764870000.1}

An optional ``messages`` (``[{"role": ..., "content": ...}]``, a multi-turn session) replaces prompt and response
in the page's conversation view. ``token_ids`` is prompt + response; ``logprobs`` and ``loss_mask`` run along it
(``null`` logprobs on the prompt).
``latency_s``: from the sample's request to its completion (retries and waiting for a free slot included).
``engine``: the engine that served it where the reply names one (SGLang's does not: behind the router it is
``null`` and ``router`` names the router).

``RUN_DIR/steps.jsonl``: one line per (step, source): ``source`` is ``"rollout"`` (reward stats, tokens/s,
rollout time) or ``"trainer"`` (one line per rank: loss, tokens, train time); each carries ``host`` and
``cpu`` (the host's CPU use, :mod:`.host_usage`).

Lines are written whole (one ``write`` of complete lines, then a flush): a crash leaves at most a torn last
line, which readers never take as data (:mod:`.jsonl_tail`). ``RUN_DIR/collector.json`` is the collector's
count of written, refused and dropped records (rewritten atomically).
"""

from __future__ import annotations

import json
import math
from typing import Any

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
