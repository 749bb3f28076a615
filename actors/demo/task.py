"""The demo's verifiable task: answer ``copy <letters> =`` with those letters.

The prompts come from :func:`actors.rollout.tasks.make_prompts`; the reward is shaped so a random model learns.
"""

from __future__ import annotations

from collections.abc import Sequence

from actors.rollout.tasks import ALPHABET

# Credit for any letter of the task's alphabet: a randomly initialised model gets a learning signal at once.
LETTER_CREDIT = 0.25
_ALPHABET_IDS = frozenset(ALPHABET.encode())


def shaped_copy_reward(prompt_ids: Sequence[int], response_ids: Sequence[int], label: Sequence[int]) -> float:
    """Mean over the label's positions of: 1 (exact), LETTER_CREDIT (another alphabet letter) or 0.

    The letter credit knows the byte tokenizer's ids only: with a Hugging Face model (``model_path``) use
    ``actors.rollout.tasks:target_sequence_reward``."""
    if not label:
        raise ValueError("label is empty: the target sequence needs at least one token")
    score = 0.0
    for got, want in zip(response_ids, label, strict=False):
        score += 1.0 if got == want else LETTER_CREDIT if got in _ALPHABET_IDS else 0.0
    return score / len(label)
