"""Choosing the next token from one row of logits, the way SGLang's sampler does."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import torch

from actors.cpu_engine.io_struct import SamplingParams

TopLogprobs = list[tuple[float, int]]


def temperature_of(params: SamplingParams) -> float:
    """The temperature logprobs are computed at (SGLang normalises greedy requests to 1.0)."""
    return 1.0 if params.is_greedy else params.temperature


def adjust_logits(logits: torch.Tensor, params: SamplingParams, output_ids: Sequence[int]) -> torch.Tensor:
    """``logits`` with penalties for the tokens in ``output_ids`` and the logit bias applied (a copy if changed).

    As SGLang's penalizers (``srt/sampling/penaltylib``): frequency and presence penalties subtract
    ``penalty * count`` / ``penalty`` for tokens already generated; the repetition penalty divides positive and
    multiplies negative logits of generated tokens.
    """
    penalised = params.frequency_penalty or params.presence_penalty or params.repetition_penalty != 1.0
    if not (penalised and output_ids) and not params.logit_bias:
        return logits
    logits = logits.clone()
    if penalised and output_ids:
        counts = Counter(output_ids)
        ids = torch.tensor(list(counts), dtype=torch.long)
        times = torch.tensor(list(counts.values()), dtype=logits.dtype)
        seen = logits[ids]
        if params.repetition_penalty != 1.0:
            seen = torch.where(seen > 0, seen / params.repetition_penalty, seen * params.repetition_penalty)
        seen = seen - params.frequency_penalty * times - params.presence_penalty
        logits[ids] = seen
    for key, bias in (params.logit_bias or {}).items():
        logits[int(key)] += bias
    return logits


def top_logprobs(logprobs: torch.Tensor, k: int) -> TopLogprobs:
    """The ``k`` most likely ``(logprob, token id)`` pairs, most likely first."""
    if k <= 0:
        return []
    values, ids = torch.topk(logprobs, min(k, logprobs.numel()))
    return [(float(v), int(i)) for v, i in zip(values, ids, strict=True)]


def sample_token(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator,
    output_ids: Sequence[int] = (),
    top_k_logprobs: int = 0,
) -> tuple[int, float, TopLogprobs]:
    """``(token id, logprob, top logprobs)`` for a 1-D float ``logits`` row.

    Greedy (temperature ~0 or top_k=1; SGLang then uses temperature 1) takes the argmax. Otherwise top-k / top-p /
    min-p keep a subset of the temperature-scaled distribution and a token is drawn with the request's own
    generator. The logprob reported is from that distribution before truncation (SGLang's default).
    """
    logits = adjust_logits(logits, params, output_ids)
    logprobs = torch.log_softmax(logits / temperature_of(params), dim=-1)
    tops = top_logprobs(logprobs, top_k_logprobs)
    if params.is_greedy:
        token = int(torch.argmax(logits))
        return token, float(logprobs[token]), tops
    probs = logprobs.exp()
    keep = torch.ones_like(probs, dtype=torch.bool)
    if params.top_k > 0 and params.top_k < probs.numel():
        threshold = torch.topk(probs, params.top_k).values[-1]
        keep &= probs >= threshold
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        before = torch.cumsum(sorted_probs, dim=0) - sorted_probs  # mass strictly ahead of each token
        sorted_keep = before < params.top_p
        keep &= torch.zeros_like(keep).scatter(0, order, sorted_keep)
    if params.min_p > 0.0:
        keep &= probs >= params.min_p * probs.max()
    filtered = torch.where(keep, probs, torch.zeros_like(probs))
    token = int(torch.multinomial(filtered, 1, generator=generator))
    return token, float(logprobs[token]), tops
