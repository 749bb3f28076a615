"""A trainer group: N trainer ranks as actors, addressed as one, since every rank must construct at once (the process
group waits for all of them) and every collective method must be called on all ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from actors.processes import free_port
from actors.trainer.config import TrainerConfig
from actors.trainer.objective_config import ObjectiveConfig
from runtime import ActorError, ActorGroup, ActorHandle, spawn_many

TRAINER_CLASS = "actors.trainer.actor:TrainerActor"


def rank_kwargs(rank: int, world_size: int, master_addr: str, master_port: int, config: TrainerConfig) -> dict:
    """Constructor arguments of one rank."""
    return {"rank": rank, "world_size": world_size, "master_addr": master_addr, "master_port": master_port,
            "config": config}  # fmt: skip


class TrainerGroup:
    """The ranks of one trainer, in rank order."""

    def __init__(self, handles: Sequence[ActorHandle], layouts: Sequence[dict[str, Any]]) -> None:
        self.handles = list(handles)
        self.ranks = ActorGroup(self.handles)
        self.layouts = list(layouts)

    @classmethod
    def spawn(
        cls,
        *,
        world_size: int,
        config: TrainerConfig,
        name: str = "trainer",
        master_port: int | None = None,
        env: dict[str, str] | None = None,
        deadline_s: float = 300.0,
    ) -> TrainerGroup:
        """Start ``world_size`` local rank processes (gloo on CPU) and wait until all have joined."""
        config.parallel.data_parallel_size(world_size)  # a bad layout fails here, before any process starts
        port = master_port or free_port()
        handles = spawn_many(
            TRAINER_CLASS, world_size, name_prefix=name, env=env, deadline_s=deadline_s,
            kwargs_each=[rank_kwargs(rank, world_size, "127.0.0.1", port, config) for rank in range(world_size)],
        )  # fmt: skip
        return cls.from_handles(handles)

    @classmethod
    def from_handles(cls, handles: Sequence[ActorHandle]) -> TrainerGroup:
        """A group over ranks already constructed elsewhere (e.g. by a launcher), given in rank order."""
        layouts = ActorGroup(handles).parallel_layout().result(timeout=30)
        for index, layout in enumerate(layouts):
            if layout["rank"] != index:
                raise ValueError(f"trainer handles must be in rank order: position {index} holds rank {layout['rank']}")
        return cls(handles, layouts)

    @property
    def dp_size(self) -> int:
        return int(self.layouts[0]["dp_size"])

    def _shard(self, rows: Sequence[Any] | None, dp_rank: int) -> Any:
        if rows is None:
            return None
        base, extra = divmod(len(rows), self.dp_size)
        start = dp_rank * base + min(dp_rank, extra)
        return rows[start : start + base + (1 if dp_rank < extra else 0)]

    def _collect(self, method: str, per_rank: list[dict[str, Any]], timeout_s: float) -> list[Any]:
        """Call ``method`` on every rank; a rank that dies mid-step fails the call with an error naming the rank,
        never a hang: the runtime reports the dead process at once and the survivors' collectives time out after
        ``collective_timeout_s``."""
        calls = [h.method(method)(**kw) for h, kw in zip(self.handles, per_rank, strict=True)]
        results: list[Any] = []
        failures: list[str] = []
        for rank, call in enumerate(calls):
            try:
                results.append(call.result(timeout=timeout_s))
            except ActorError as exc:
                failures.append(f"rank {rank}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
                results.append(exc)
        if failures:
            raise TrainerGroupError(f"{method} failed on {len(failures)} of {len(calls)} ranks: " + "; ".join(failures))
        return results

    def train_step(
        self,
        tokens: Sequence[Sequence[int]],
        loss_mask: Sequence[Sequence[float]] | None,
        advantages: Sequence[float] | Sequence[Sequence[float]],
        *,
        rollout_logprobs: Sequence[Sequence[float]] | None = None,
        version_lags: Sequence[Sequence[int]] | None = None,
        temperature: float = 1.0,
        timeout_s: float = 600.0,
    ) -> dict[str, float]:
        """Train on the whole rollout batch (Trainer.train_step on each rank's shard); returns rank 0's metrics
        (they are global). Each data-parallel rank gets its contiguous shard; tensor-parallel peers the same one."""
        per_rank = [
            {"tokens": self._shard(tokens, lay["dp_rank"]), "loss_mask": self._shard(loss_mask, lay["dp_rank"]),
             "advantages": self._shard(advantages, lay["dp_rank"]),
             "rollout_logprobs": self._shard(rollout_logprobs, lay["dp_rank"]),
             "version_lags": self._shard(version_lags, lay["dp_rank"]), "temperature": temperature}
            for lay in self.layouts
        ]  # fmt: skip
        return self._collect("train_step", per_rank, timeout_s)[0]

    def train_on_shards(self, shards: Sequence[Any], *, timeout_s: float = 600.0) -> dict[str, float]:
        """One step where DP rank ``r`` trains on ``shards[r]`` (ObjectRefs, fetched by the ranks themselves)."""
        if len(shards) != self.dp_size:
            raise ValueError(f"{len(shards)} shards for {self.dp_size} data-parallel ranks")
        per_rank = [{"shard": shards[lay["dp_rank"]]} for lay in self.layouts]
        return self._collect("train_shard", per_rank, timeout_s)[0]

    def broadcast(self, method: str, *, timeout_s: float = 600.0, **kwargs: Any) -> list[Any]:
        """Call ``method(**kwargs)`` on every rank (collectives need all of them); results in rank order."""
        return self._collect(method, [kwargs] * len(self.handles), timeout_s)

    def push_weights(
        self, urls: list[str], weight_version: str, *, timeout_s: float = 300.0, flush_cache: bool = True
    ) -> list[dict]:
        return self.broadcast("push_weights_to_engines", urls=urls, weight_version=weight_version,
                              timeout_s=timeout_s, flush_cache=flush_cache)[0]  # fmt: skip

    def save_hf_checkpoint(self, path: str, *, timeout_s: float = 600.0) -> str:
        """Write the current weights as a Hugging Face directory at ``path`` (rank 0 writes); returns it."""
        return self.broadcast("save_hf_checkpoint", path=path, timeout_s=timeout_s)[0]

    def export_hf_weights(self) -> list[tuple[str, Any]]:
        return self.broadcast("export_hf_weights")[0]

    def objective(self) -> ObjectiveConfig:
        """The objective the ranks train with (rank 0's; every rank has the same config)."""
        return ObjectiveConfig.model_validate(self.handles[0].objective().result(timeout=30))

    def health(self) -> list[dict[str, Any]]:
        return self.ranks.health().result(timeout=10)

    def kill(self) -> None:
        self.ranks.kill()


class TrainerGroupError(RuntimeError):
    """A collective call failed on one or more ranks; the message names each rank and why."""
