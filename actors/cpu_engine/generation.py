"""Running one batch of sequences to completion on the engine's compute thread (synchronous code): a prefill per
prompt (reusing cached prefixes), then batched decode steps over a left-padded KV cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from threading import Lock
from typing import Any

import torch

from actors.cpu_engine.model import KVCache, LlamaForCausalLM
from actors.cpu_engine.prefix_cache import PrefixCache
from actors.cpu_engine.protocol import GenerationItem
from actors.cpu_engine.sampling import TopLogprobs, sample_token, temperature_of, top_logprobs
from actors.cpu_engine.weight_versions import VersionEvent, version_spans
from actors.tokenizer import BYTE_TOKENIZER, Tokenizer


@dataclass
class Sequence:
    """The state of one prompt being completed; ``abort_message`` may be set from any thread."""

    item: GenerationItem
    generator: torch.Generator
    max_new_tokens: int
    tokenizer: Tokenizer = BYTE_TOKENIZER
    eos_ids: frozenset[int] = frozenset(BYTE_TOKENIZER.eos_token_ids)
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    output_top: list[TopLogprobs] = field(default_factory=list)
    input_logprobs: list[float | None] = field(default_factory=list)
    input_top: list[TopLogprobs | None] = field(default_factory=list)
    cached_tokens: int = 0
    finish_reason: dict[str, Any] | None = None
    abort_message: str | None = None
    trim_text_at: str | None = None
    trim_last_token: bool = False
    created_at: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    version_events: list[VersionEvent] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def check_abort(self) -> None:
        if self.abort_message is not None and not self.done:
            # SGLang's FINISH_ABORT.to_json(); a graceful abort has no status code
            self.finish_reason = {"type": "abort", "message": self.abort_message, "status_code": None, "err_type": None}

    def step(self, logits: torch.Tensor) -> int:
        """Sample the next token from ``logits``, record it and decide whether the sequence is finished."""
        params = self.item.params
        stop_ids = set(params.stop_token_ids or [])
        if not params.ignore_eos:
            stop_ids |= self.eos_ids
        if len(self.output_ids) < params.min_new_tokens and stop_ids:
            logits = logits.clone()
            logits[[i for i in stop_ids if 0 <= i < logits.numel()]] = float("-inf")
        token, logprob, tops = sample_token(
            logits,
            params,
            self.generator,
            self.output_ids,
            self.item.top_logprobs_num if self.item.return_logprob else 0,
        )
        self.first_token_at = self.first_token_at or time.monotonic()
        self.output_ids.append(token)
        self.logprobs.append(logprob)
        self.output_top.append(tops)
        may_stop = len(self.output_ids) >= params.min_new_tokens
        if may_stop and token in stop_ids:
            self.finish_reason = {"type": "stop", "matched": token}
            self.trim_last_token = not params.no_stop_trim
        elif may_stop and params.stop_strings:
            text = self.tokenizer.decode(self.output_ids)
            matched = next((s for s in params.stop_strings if s and s in text), None)
            if matched is not None:
                self.finish_reason = {"type": "stop", "matched": matched}
                self.trim_text_at = None if params.no_stop_trim else matched
        if not self.done and len(self.output_ids) >= self.max_new_tokens:
            self.finish_reason = {"type": "length", "length": len(self.output_ids)}
        return token

    def record_input_logprobs(self, logits: torch.Tensor, first: int) -> None:
        """SGLang's input logprobs from prompt logits ``[T, vocab]`` whose row 0 is prompt position ``first``."""
        start, prompt = self.item.input_logprob_start, self.item.input_ids
        if start >= len(prompt):
            return
        scaled = torch.log_softmax(logits / temperature_of(self.item.params), dim=-1)
        self.input_logprobs, self.input_top = [None], [None]  # SGLang: the token at start has no logprob
        for position in range(start + 1, len(prompt)):
            row = scaled[position - 1 - first]
            self.input_logprobs.append(float(row[prompt[position]]))
            self.input_top.append(top_logprobs(row, self.item.top_logprobs_num))

    def text(self) -> str:
        """The completion as text, with a matched stop token or stop string trimmed (SGLang default)."""
        ids = self.output_ids[:-1] if self.trim_last_token else self.output_ids
        text = self.tokenizer.decode(ids)
        if self.trim_text_at is not None:
            text = text[: text.find(self.trim_text_at)] if self.trim_text_at in text else text
        return text

    def response(self, weight_version: str) -> dict[str, Any]:
        """SGLang's ``/generate`` answer for this sequence (so far, while streaming)."""
        meta: dict[str, Any] = {
            "id": self.item.rid,
            "finish_reason": self.finish_reason,
            "prompt_tokens": len(self.item.input_ids),
            "completion_tokens": len(self.output_ids),
            "cached_tokens": self.cached_tokens,
            "weight_version": weight_version,
            "e2e_latency": time.monotonic() - self.created_at,
        }
        if self.done:  # SGLang's output streamer: spans for finished requests only
            meta["weight_versions"] = version_spans(self.version_events, weight_version, len(self.output_ids))
            meta["weight_version"] = meta["weight_versions"][-1]["version"]
        if self.item.return_logprob:
            self._add_logprobs(meta)
        text = self.text()
        if not self.done:  # detokenizer_manager: a trailing incomplete character waits for its next bytes
            text = text.rstrip("\ufffd")
        return {"text": text, "output_ids": list(self.output_ids), "meta_info": meta}

    def _add_logprobs(self, meta: dict[str, Any]) -> None:
        """``tokenizer_manager.add_logprob_to_meta_info``: ``[logprob, token id, text or None]`` triples."""
        start = self.item.input_logprob_start
        input_ids = self.item.input_ids[start:]
        meta["input_token_logprobs"] = self._triples(self.input_logprobs, input_ids)
        meta["output_token_logprobs"] = self._triples(self.logprobs, self.output_ids)
        meta["output_token_logprobs_length"] = len(self.output_ids)
        if self.item.top_logprobs_num > 0:
            meta["input_top_logprobs"] = [self._top(t) for t in self.input_top]
            meta["output_top_logprobs"] = [self._top(t) for t in self.output_top]

    def _triples(self, values: list[Any], ids: list[int]) -> list[list[Any]]:
        text = self.item.logprob_text
        return [[v, t, self.tokenizer.decode([t]) if text else None] for v, t in zip(values, ids, strict=True)]

    def _top(self, tops: TopLogprobs | None) -> list[list[Any]] | None:
        return None if tops is None else self._triples([v for v, _ in tops], [t for _, t in tops])


def prefill(
    model: LlamaForCausalLM, seq: Sequence, *, model_lock: Lock, prefix_cache: PrefixCache | None
) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """One prompt's keys/values per layer ``[n_kv, T, hd]`` and its last logits, reusing a cached prefix.

    The prefix reused stops before the first position whose input logprob was asked for (as SGLang), and
    always leaves at least one token to compute.
    """
    prompt = seq.item.input_ids
    limit = min(len(prompt) - 1, seq.item.input_logprob_start)
    hit = prefix_cache.match(prompt, limit) if prefix_cache is not None else None
    reused = hit.length if hit is not None else 0
    dtype = model.lm_head.weight.dtype
    cache = KVCache.allocate(model.config, 1, len(prompt), dtype)
    if hit is not None:
        for layer in range(model.config.num_layers):
            cache.keys[layer][0, :, :reused] = hit.keys[layer]
            cache.values[layer][0, :, :reused] = hit.values[layer]
        cache.length = reused
    new_ids = torch.tensor([prompt[reused:]], dtype=torch.long)
    positions = torch.arange(reused, len(prompt))[None]
    with model_lock, torch.inference_mode():
        logits = model(new_ids, positions=positions, cache=cache)[0]
    keys = [k[0] for k in cache.keys]
    values = [v[0] for v in cache.values]
    if prefix_cache is not None:
        prefix_cache.insert(prompt, keys, values)
    seq.cached_tokens = reused
    if seq.item.parallel_sample and prefix_cache is not None and prefix_cache.max_tokens > 0:
        seq.cached_tokens = limit  # SGLang prefills an n > 1 prompt once first; each sample then finds it cached
    seq.record_input_logprobs(logits, reused)
    return keys, values, logits[-1]


def run_batch(
    model: LlamaForCausalLM,
    sequences: list[Sequence],
    *,
    model_lock: Lock,
    before_step: Callable[[list[Sequence]], bool | None],
    prefix_cache: PrefixCache | None = None,
) -> None:
    """Generate until every sequence in ``sequences`` is finished (stop, length or abort).

    The model (anything with ``config``: layers, kv heads, head dim; and ``forward(input_ids, positions=,
    key_valid=, cache=)``) is only touched under ``model_lock``, so weights can be swapped between decode steps.
    ``before_step`` runs between steps, outside the lock (the engine blocks a paused batch, streams progress or
    marks aborts there); when it returns True the batch was retracted (its KV freed): the keys and values of every
    live sequence are recomputed from its tokens so far with the current weights before the next step.
    A sequence with ``max_new_tokens == 0`` is prefilled only (input logprobs, prefix cache), as SGLang's
    prefill-only requests. Finished sequences leave their prompt and output in ``prefix_cache``.
    """
    for seq in sequences:
        seq.check_abort()
    prefilling = [seq for seq in sequences if not seq.done]
    prefilled = [prefill(model, seq, model_lock=model_lock, prefix_cache=prefix_cache) for seq in prefilling]
    for seq in prefilling:
        if seq.max_new_tokens <= 0:
            seq.finish_reason = {"type": "length", "length": 0}
    live = [seq for seq in prefilling if not seq.done]
    prefilled = [result for seq, result in zip(prefilling, prefilled, strict=True) if not seq.done]
    if not live:
        return
    prompt_lens = [len(seq.item.input_ids) for seq in live]
    width = max(prompt_lens)
    starts = torch.tensor([width - length for length in prompt_lens])  # left padding: last tokens line up
    capacity = width + max(seq.max_new_tokens for seq in live)
    cache = KVCache.allocate(model.config, len(live), capacity, model.lm_head.weight.dtype)
    key_valid = torch.zeros(len(live), capacity, dtype=torch.bool)
    for row, (keys, values, _) in enumerate(prefilled):
        start = int(starts[row])
        for layer in range(model.config.num_layers):
            cache.keys[layer][row, :, start:width] = keys[layer]
            cache.values[layer][row, :, start:width] = values[layer]
        key_valid[row, start:width] = True
    cache.length = width
    next_positions = torch.tensor(prompt_lens, dtype=torch.long)
    logits = torch.stack([last for _, _, last in prefilled])
    while True:
        tokens = [seq.step(logits[row]) for row, seq in enumerate(live)]
        finished = [row for row, seq in enumerate(live) if seq.done]
        if prefix_cache is not None:  # before before_step answers them (SGLang caches a request before it replies)
            _cache_finished(prefix_cache, live, finished, cache, starts)
        retracted = bool(before_step(live))
        for seq in live:
            seq.check_abort()
        keep = [row for row, seq in enumerate(live) if not seq.done]
        if prefix_cache is not None:  # aborted in before_step: answered at the next step or when the batch ends
            aborted = [row for row, seq in enumerate(live) if seq.done and row not in finished]
            _cache_finished(prefix_cache, live, aborted, cache, starts)
        if not keep:
            return
        if len(keep) < len(live):  # drop finished rows so they cost nothing from here on
            index = torch.tensor(keep, dtype=torch.long)
            cache.keys = [k.index_select(0, index) for k in cache.keys]
            cache.values = [v.index_select(0, index) for v in cache.values]
            key_valid, next_positions, starts = key_valid[index], next_positions[index], starts[index]
            live, tokens = [live[row] for row in keep], [tokens[row] for row in keep]
        if retracted:
            _recompute(model, live, cache, starts, model_lock=model_lock)
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


def _recompute(
    model: LlamaForCausalLM, live: list[Sequence], cache: KVCache, starts: torch.Tensor, *, model_lock: Lock
) -> None:
    """A retracted batch back from the waiting queue (SGLang's ``retract_all`` frees the KV; the request is
    prefilled again over its prompt and output): each row's keys and values for its prompt and output but the
    last token (not fed yet), computed again with the weights loaded now, in place in the batch cache."""
    for row, seq in enumerate(live):
        start = int(starts[row])
        tokens = [*seq.item.input_ids, *seq.output_ids[:-1]]
        assert cache.length - start == len(tokens), (cache.length, start, len(tokens))
        fresh = KVCache.allocate(model.config, 1, len(tokens), cache.keys[0].dtype)
        with model_lock, torch.inference_mode():
            model(torch.tensor([tokens], dtype=torch.long), positions=torch.arange(len(tokens))[None], cache=fresh)
        for layer in range(model.config.num_layers):
            cache.keys[layer][row, :, start : cache.length] = fresh.keys[layer][0, :, : len(tokens)]
            cache.values[layer][row, :, start : cache.length] = fresh.values[layer][0, :, : len(tokens)]


def _cache_finished(
    prefix_cache: PrefixCache, live: list[Sequence], rows: list[int], cache: KVCache, starts: torch.Tensor
) -> None:
    """Insert each finished row's prompt and output but the last token (the last was never fed to the model)."""
    for row in rows:
        seq = live[row]
        if len(seq.output_ids) < 2:
            continue  # with one output token the prompt alone is computed, and it was cached at prefill
        start = int(starts[row])
        tokens = [*seq.item.input_ids, *seq.output_ids[:-1]]
        assert cache.length - start == len(tokens), (cache.length, start, len(tokens))
        keys = [k[row, :, start : cache.length] for k in cache.keys]
        values = [v[row, :, start : cache.length] for v in cache.values]
        prefix_cache.insert(tokens, keys, values)
