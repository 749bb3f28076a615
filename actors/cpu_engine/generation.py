"""Running one batch of sequences to completion: a left-padded prefill, then one decode step at a time.

This is synchronous code for the engine's compute thread. The model is only touched under
``model_lock``, so weights can be swapped between decode steps. ``before_step`` runs between steps
(outside the lock) and is where the engine blocks a paused batch or marks sequences aborted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from threading import Lock
from typing import Any

import torch

from actors import tokenizer
from actors.cpu_engine.model import KVCache, LlamaForCausalLM
from actors.cpu_engine.protocol import GenerationItem
from actors.cpu_engine.sampling import sample_token


@dataclass
class Sequence:
    """The state of one prompt being completed; ``abort_message`` may be set from any thread."""

    item: GenerationItem
    generator: torch.Generator
    max_new_tokens: int
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: dict[str, Any] | None = None
    abort_message: str | None = None
    trim_text_at: str | None = None
    trim_last_token: bool = False
    created_at: float = field(default_factory=time.monotonic)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def check_abort(self) -> None:
        if self.abort_message is not None and not self.done:
            self.finish_reason = {"type": "abort", "message": self.abort_message}

    def step(self, logits: torch.Tensor, eos_id: int) -> int:
        """Sample the next token from ``logits``, record it and decide whether the sequence is finished."""
        params = self.item.params
        stop_ids = set(params.stop_token_ids or [])
        if not params.ignore_eos:
            stop_ids.add(eos_id)
        if len(self.output_ids) < params.min_new_tokens and stop_ids:
            logits = logits.clone()
            logits[[i for i in stop_ids if 0 <= i < logits.numel()]] = float("-inf")
        token, logprob = sample_token(logits, params, self.generator)
        self.output_ids.append(token)
        self.logprobs.append(logprob)
        may_stop = len(self.output_ids) >= params.min_new_tokens
        if may_stop and token in stop_ids:
            self.finish_reason = {"type": "stop", "matched": token}
            self.trim_last_token = not params.no_stop_trim
        elif may_stop and params.stop_strings:
            text = tokenizer.decode(self.output_ids)
            matched = next((s for s in params.stop_strings if s and s in text), None)
            if matched is not None:
                self.finish_reason = {"type": "stop", "matched": matched}
                self.trim_text_at = None if params.no_stop_trim else matched
        if not self.done and len(self.output_ids) >= self.max_new_tokens:
            self.finish_reason = {"type": "length", "length": len(self.output_ids)}
        return token

    def text(self) -> str:
        """The completion as text, with a matched stop token or stop string trimmed (SGLang default)."""
        ids = self.output_ids[:-1] if self.trim_last_token else self.output_ids
        text = tokenizer.decode(ids)
        if self.trim_text_at is not None:
            text = text[: text.find(self.trim_text_at)] if self.trim_text_at in text else text
        return text

    def response(self, weight_version: str) -> dict[str, Any]:
        """SGLang's ``/generate`` answer for this sequence."""
        meta: dict[str, Any] = {
            "id": self.item.rid,
            "finish_reason": self.finish_reason,
            "prompt_tokens": len(self.item.input_ids),
            "completion_tokens": len(self.output_ids),
            "cached_tokens": 0,
            "weight_version": weight_version,
            "e2e_latency": time.monotonic() - self.created_at,
        }
        if self.item.return_logprob:
            meta["output_token_logprobs"] = [
                [logprob, token, tokenizer.decode([token]) if self.item.logprob_text else None]
                for logprob, token in zip(self.logprobs, self.output_ids, strict=True)
            ]
        return {"text": self.text(), "output_ids": list(self.output_ids), "meta_info": meta}


def run_batch(
    model: LlamaForCausalLM,
    sequences: list[Sequence],
    *,
    model_lock: Lock,
    before_step: Callable[[list[Sequence]], None],
    eos_id: int = tokenizer.EOS_ID,
) -> None:
    """Generate until every sequence in ``sequences`` is finished (stop, length or abort)."""
    for seq in sequences:
        seq.check_abort()
        if not seq.done and seq.max_new_tokens <= 0:
            seq.finish_reason = {"type": "length", "length": 0}
    live = [seq for seq in sequences if not seq.done]
    if not live:
        return
    prompt_lens = [len(seq.item.input_ids) for seq in live]
    width = max(prompt_lens)
    capacity = width + max(seq.max_new_tokens for seq in live)
    input_ids = torch.zeros(len(live), width, dtype=torch.long)
    key_valid = torch.zeros(len(live), capacity, dtype=torch.bool)
    for row, seq in enumerate(live):
        start = width - prompt_lens[row]  # left padding keeps every row's last token in the last column
        input_ids[row, start:] = torch.tensor(seq.item.input_ids, dtype=torch.long)
        key_valid[row, start:width] = True
    positions = (key_valid[:, :width].long().cumsum(1) - 1).clamp(min=0)
    next_positions = torch.tensor(prompt_lens, dtype=torch.long)
    dtype = model.lm_head.weight.dtype
    cache = KVCache.allocate(model.config, len(live), capacity, dtype)
    with model_lock, torch.inference_mode():
        logits = model(input_ids, positions=positions, key_valid=key_valid[:, :width], cache=cache)[:, -1]
    while True:
        tokens = [seq.step(logits[row], eos_id) for row, seq in enumerate(live)]
        before_step(live)
        for seq in live:
            seq.check_abort()
        keep = [row for row, seq in enumerate(live) if not seq.done]
        if not keep:
            return
        if len(keep) < len(live):  # drop finished rows so they cost nothing from here on
            index = torch.tensor(keep, dtype=torch.long)
            cache.keys = [k.index_select(0, index) for k in cache.keys]
            cache.values = [v.index_select(0, index) for v in cache.values]
            key_valid, next_positions = key_valid[index], next_positions[index]
            live, tokens = [live[row] for row in keep], [tokens[row] for row in keep]
        key_valid[:, cache.length] = True
        step_ids = torch.tensor(tokens, dtype=torch.long)[:, None]
        with model_lock, torch.inference_mode():
            logits = model(
                step_ids,
                positions=next_positions[:, None],
                key_valid=key_valid[:, : cache.length + 1],
                cache=cache,
            )[:, -1]
        next_positions = next_positions + 1
