"""Every error the trainer raises, in one place.

=====================  ==========================================================  ==========================
error                  what happened                                               what to do
=====================  ==========================================================  ==========================
BatchRejected          a rank's shard is malformed, or TP peers got different      fix the batch; the trainer
                       shards; every rank raises it, nothing was changed           is still usable
TrainerFailed          a collective failed or timed out (a peer died, hung, or     restart the whole trainer
                       the network broke); ranks may now disagree                  group from a checkpoint
CheckpointError        a checkpoint could not be written, or does not fit this     check the path (shared?),
                       trainer (TP size, model config, missing files)              TP size and model config
WeightPushError        an engine refused or did not answer a weight update         check the engine; retry
=====================  ==========================================================  ==========================
"""

from __future__ import annotations


class TrainerError(RuntimeError):
    """Base class of the trainer's errors."""


class BatchRejected(TrainerError, ValueError):
    """A training batch was refused on every rank before any weight changed."""


class TrainerFailed(TrainerError):
    """The trainer group is broken (failed or timed-out collective); later calls raise this too."""


class CheckpointError(TrainerError):
    """A checkpoint that cannot be written or does not fit this trainer; raised on every rank."""


class WeightPushError(TrainerError):
    """An engine refused or did not answer a weight update; says which engine and why."""
