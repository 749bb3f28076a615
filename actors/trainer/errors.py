"""Every error the trainer raises, in one place; each class says what happened and what to do."""

from __future__ import annotations


class TrainerError(RuntimeError):
    """Base class of the trainer's errors."""


class BatchRejected(TrainerError, ValueError):
    """A rank's shard is malformed, or TP peers got different shards: refused on every rank before any weight
    changed. Fix the batch; the trainer is still usable."""


class TrainerFailed(TrainerError):
    """A collective failed or timed out (a peer died or hung, the network broke) and ranks may now disagree; later
    calls raise this too. Restart the whole trainer group from a checkpoint."""


class CheckpointError(TrainerError):
    """A checkpoint that cannot be written or does not fit this trainer (TP size, model config, missing files);
    raised on every rank. Check the path (shared by every rank?), the TP size and the model config."""


class WeightPushError(TrainerError):
    """An engine refused or did not answer a weight update; says which engine and why. Check it, then retry."""
