"""The demo's collective group for weight sync over refs: trainer rank 0 and the engine actors, kept current.

Used with ``weight_sync = "refs"`` (``[job.args]``): updates then move over a gloo group instead of HTTP bodies.
"""

from __future__ import annotations

import itertools
import logging

from actors.trainer.group import TrainerGroup
from runtime import ActorHandle
from runtime.collective import CollectiveGroup, create_group, destroy_group

log = logging.getLogger(__name__)

GROUP_TIMEOUT_S = 60.0
NEEDS_ACTOR_ENGINES = (
    "job.args.weight_sync = 'refs' needs the inference controller's engines to be actors (CPU engines only): set "
    'launcher = "actors.inference.actor_engines:actor_engine_launcher" in the inference pool\'s '
    '[pools.worker.kwargs], or make its engine_pool a pool of engine actors (kind = "serve", actor_class = '
    '"actors.cpu_engine.engine_actor:CPUEngineActor": actors.inference.engine_pool.engine_pool(..., '
    "as_actor=True)), or use weight_sync = 'http'"
)


class RefGroup:
    """Pushes weights over refs to the engines an update paused, forming the group they need: each update's buckets
    go from trainer rank 0 into the engines' parameters (``TrainerActor.push_weights_over_refs``,
    :mod:`actors.trainer.weights_collective`)."""

    def __init__(self, trainer: TrainerGroup, *, name: str = "demo-weights") -> None:
        self.trainer = trainer
        self.name = name
        self.group: CollectiveGroup | None = None
        self._engines: list[tuple[str, int]] = []
        self._formed = itertools.count()

    def push(self, engines: list[ActorHandle] | None, version: str, timeout_s: float = 300.0) -> list[dict]:
        """Every engine pulls the trainer's weights (as ``version``); returns the engines' replies."""
        if not engines:
            raise ValueError(NEEDS_ACTOR_ENGINES)
        group = self._group_for(engines)
        return self.trainer.broadcast(
            "push_weights_over_refs", engines=engines, weight_version=version, group=group.name, timeout_s=timeout_s,
        )[0]  # fmt: skip

    def close(self) -> None:
        """Every member leaves the group (if one was formed)."""
        if self.group is not None:
            group, self.group, self._engines = self.group, None, []
            destroy_group(group)

    def _group_for(self, engines: list[ActorHandle]) -> CollectiveGroup:
        """The group, formed at the first update and again whenever the paused engines are not the members it has
        (an engine restarted: a new actor); the old group is destroyed first (a dead member is skipped)."""
        members = [(engine.endpoint, engine.pid) for engine in engines]
        if self.group is not None and members == self._engines:
            return self.group
        self.close()
        name = f"{self.name}-{next(self._formed)}"
        self.group = create_group([self.trainer.handles[0], *engines], backend="gloo", name=name,
                                  timeout_s=GROUP_TIMEOUT_S)  # fmt: skip
        self._engines = members
        log.info("weight sync over refs: group %s of trainer rank 0 and %d engine(s)", name, len(engines))
        return self.group
