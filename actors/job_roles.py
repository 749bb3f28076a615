"""The actors an RL job's main finds in its launch: the ``trainer`` ranks, one ``inference`` controller, one
``rollout`` (the pool ids the demo, async demo and agent-sessions examples use)."""

from __future__ import annotations

from typing import Any

from actors.trainer.group import TrainerGroup
from runtime import ActorHandle


def rl_roles(ctx: Any) -> tuple[TrainerGroup, ActorHandle, ActorHandle]:
    """(trainer group, controller, rollout) from a launcher.JobContext; an ``inference`` or ``rollout`` pool
    with other than one cell raises ValueError (unpacking), never picks one."""
    trainer = TrainerGroup.from_handles(ctx.handles("trainer"))
    (controller,) = ctx.handles("inference")
    (rollout,) = ctx.handles("rollout")
    return trainer, controller, rollout
