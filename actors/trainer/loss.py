"""The policy-gradient objective: REINFORCE with advantages, averaged over the masked tokens of all ranks."""

from __future__ import annotations

from torch import Tensor


def policy_gradient_loss_sum(logprobs: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
    """``sum(-advantage * log pi(token))`` over masked tokens; all three are [b, s - 1].

    The trainer divides by the masked-token count of the whole data-parallel batch (all ranks), then
    sums gradients over the DP group: the result is the exact token mean over the global batch, whatever
    the shard sizes.
    """
    return -(advantages * logprobs * mask).sum()
