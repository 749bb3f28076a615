"""What the rollout executor records for the dashboard per ``generate`` call: every sample and the step's metrics."""

from __future__ import annotations

from typing import Any, Protocol

from actors.dashboard.host_usage import host_usage
from actors.dashboard.recorder import DashboardRecorder
from actors.dashboard.records import reward_stats, sample_record


class Decoder(Protocol):
    def decode(self, ids: list[int], *, skip_special_tokens: bool = True) -> str: ...


def record_rollout(
    recorder: DashboardRecorder,
    *,
    step: int,
    prompts: list[dict[str, Any]],
    prompt_ids: list[list[int]],
    completions: list[Any],
    rewards: list[float],
    advantages: list[float],
    latencies: dict[int, float],
    stats: dict[str, Any],
    tokenizer: Decoder,
    router_url: str,
    group: int,
) -> None:
    """Queue one samples record per completion and one ``rollout`` steps record (never blocks)."""
    if not recorder.enabled:
        return
    for i, completion in enumerate(completions):
        prompt = i // group
        ids = prompt_ids[prompt]
        text = prompts[prompt].get("text")
        recorder.record("samples", sample_record(
            step=step, sample_index=i, prompt_ids=ids, response_ids=completion.output_ids,
            logprobs=completion.logprobs, reward=rewards[i],
            texts={"prompt": text if isinstance(text, str) else tokenizer.decode(ids, skip_special_tokens=False),
                   "response": tokenizer.decode(completion.output_ids, skip_special_tokens=False),
                   "token_texts": [_token_text(tokenizer, t) for t in [*ids, *completion.output_ids]]},
            prompt_index=prompt, group_index=i % group, advantage=advantages[i],
            weight_version=completion.weight_version, engine=getattr(completion, "engine", None),
            router=router_url, latency_s=latencies.get(i), finish_reason=completion.finish_reason,
            attempts=completion.attempts,
        ))  # fmt: skip
    recorder.record("steps", {
        "step": step, "source": "rollout", **reward_stats(rewards),
        "samples": stats["samples"], "prompts": stats["prompts"], "tokens_generated": stats["tokens_generated"],
        "tokens_per_s": stats["tokens_per_s"], "rollout_s": stats["elapsed_s"], "retries": stats["retries"],
        "weight_versions": stats["weight_versions"], "cpu": host_usage(),
    })  # fmt: skip


def _token_text(tokenizer: Decoder, token: int) -> str:
    """The token's own text; ``<id>`` for one that decodes to nothing or to a partial character (a byte of a
    multi-byte UTF-8 sequence, a special token)."""
    text = tokenizer.decode([token], skip_special_tokens=False)
    return text if text and "\ufffd" not in text else f"<{token}>"
