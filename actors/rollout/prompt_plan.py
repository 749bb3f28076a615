"""Which prompts a training batch holds and which sampling seed each of their samples gets, for both loops: the same
seeds draw the same prompts and, on the same weights, the same samples, so at ``max_staleness = 0`` the asynchronous
loop trains on the synchronous loop's batches, step for step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from actors.rollout.tasks import make_prompts
from actors.tokenizer import BYTE_TOKENIZER, Tokenizer

DATA_SEED_STRIDE = 100_003  # batch b of data seed s draws its prompts from seed s * stride + b + 1


@dataclass(frozen=True)
class PromptPlan:
    """The copy task's prompts, batch by batch: ``prompts_per_batch`` prompts of ``target_len`` letters.

    The synchronous demo (actors/demo/loop.py) asks for batch ``b``'s prompts at once (:meth:`batch`); the
    asynchronous rollout (actors/rollout/async_executor.py) generates prompt group ``g`` on its own (:meth:`group`).
    """

    prompts_per_batch: int
    target_len: int = 4
    data_seed: int = 0
    tokenizer: Tokenizer = BYTE_TOKENIZER

    def __post_init__(self) -> None:
        if self.prompts_per_batch < 1:
            raise ValueError(f"prompts_per_batch must be at least 1, got {self.prompts_per_batch}")

    def batch(self, index: int) -> list[dict[str, Any]]:
        """Batch ``index``'s prompts (0-based: the synchronous loop's iteration ``index + 1``)."""
        if index < 0:
            raise ValueError(f"batch index must be at least 0, got {index}")
        return make_prompts(self.prompts_per_batch, target_len=self.target_len,
                            seed=self.data_seed * DATA_SEED_STRIDE + index + 1, tokenizer=self.tokenizer)  # fmt: skip

    def group(self, group_id: int) -> dict[str, Any]:
        """Prompt group ``group_id``'s prompt: position ``group_id % prompts_per_batch`` of its batch."""
        return self.batch(group_id // self.prompts_per_batch)[self.position(group_id)]

    def position(self, group_id: int) -> int:
        """Where group ``group_id`` sits in its batch."""
        return group_id % self.prompts_per_batch


def sampling_seed(seed: int | None, position: int, samples_per_prompt: int, sample: int) -> dict[str, int]:
    """``{"sampling_seed": ...}`` for sample ``sample`` of the prompt at ``position`` of a batch (``{}`` when
    ``seed`` is None: the engine seeds the request itself). Both loops seed through it: SGLang's
    ``SamplingParams.sampling_seed``, a per-request generator."""
    return {} if seed is None else {"sampling_seed": seed + position * samples_per_prompt + sample}
