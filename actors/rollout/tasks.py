"""A verifiable toy task: answer ``copy <letters> =`` with those letters; reward = fraction of positions right.

Deterministic and cheap to score, so a tiny model can learn it with GRPO and tests can check rewards exactly.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from actors.tokenizer import BYTE_TOKENIZER, Tokenizer

ALPHABET = "abcdefghij"


def make_prompts(
    count: int, *, target_len: int = 4, seed: int = 0, tokenizer: Tokenizer = BYTE_TOKENIZER
) -> list[dict[str, Any]]:
    """``count`` text prompts ``copy <target> =``, each labelled with the target's ids in ``tokenizer``.

    Prompts are dicts the rollout executor takes: ``{"text": "copy abcd =", "label": [...]}``; the executor encodes
    the text with its own tokenizer, so ``tokenizer`` must be the same one (default: the byte tokenizer of
    :mod:`actors.tokenizer`, as the built-in model uses; give a Hugging Face directory's tokenizer for an HF model).
    """
    if count < 1 or target_len < 1:
        raise ValueError(f"count and target_len must be at least 1, got {count} and {target_len}")
    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        target = "".join(rng.choice(ALPHABET) for _ in range(target_len))
        prompts.append({"text": f"copy {target} =", "label": tokenizer.encode(target, add_special_tokens=False)})
    return prompts


def target_sequence_reward(prompt_ids: Sequence[int], response_ids: Sequence[int], label: Sequence[int]) -> float:
    """Fraction of the label's positions where the response has the same token (missing tokens count wrong).

    The rollout's ``reward_fn`` names it ``"actors.rollout.tasks:target_sequence_reward"``.
    """
    if not label:
        raise ValueError("label is empty: the target sequence needs at least one token")
    return sum(1 for got, want in zip(response_ids, label, strict=False) if got == want) / len(label)
