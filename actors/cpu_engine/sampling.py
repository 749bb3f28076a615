"""Choosing the next token from one row of logits, the way SGLang's sampler does.

Greedy (temperature ~0 or top_k=1) takes the argmax and reports ``log_softmax(logits)``. Otherwise the
logits are divided by the temperature, top-k / top-p / min-p keep a subset, and a token is drawn from it
with the request's own generator; the reported logprob is from the temperature-scaled distribution
before truncation (SGLang's default, unless it runs with RETURN_ORIGINAL_LOGPROB).
"""

from __future__ import annotations

import torch

from actors.cpu_engine.protocol import SamplingParams


def sample_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> tuple[int, float]:
    """``(token id, logprob)`` for a 1-D float ``logits`` row."""
    if params.is_greedy:
        token = int(torch.argmax(logits))
        return token, float(torch.log_softmax(logits, dim=-1)[token])
    logprobs = torch.log_softmax(logits / params.temperature, dim=-1)
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
    return token, float(logprobs[token])
