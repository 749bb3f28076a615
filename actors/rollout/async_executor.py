"""The rollout executor of fully asynchronous training: it keeps generating while the trainer trains.

As miles' ``miles/rollout/fully_async_rollout.py``; :mod:`actors.rollout.staleness` bounds how old a sample may be."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from actors.rollout.advantages import balanced_ranges, informative_groups
from actors.rollout.busy_clock import BusyClock
from actors.rollout.executor import RolloutExecutor, training_fields
from actors.rollout.partial_rollout import generate_sample
from actors.rollout.prompt_plan import PromptPlan, sampling_seed
from actors.rollout.router_client import Completion
from actors.rollout.samples import GroupRecord, SampleBuffer
from actors.rollout.staleness import OnStale, StalenessBound, version_number
from runtime import method, put, within

logger = logging.getLogger(__name__)


# A producer task keeps prompt groups in flight through the router and scores each finished group into a
# SampleBuffer; next_batch takes whole batches within the staleness bound. A weight update pauses the engines:
# aborted requests resume as partial rollouts or start over (actors.rollout.partial_rollout); hold() instead lets
# the requests in flight finish on the old version first (as miles' train_async.py waits before update_weights).
class AsyncRolloutExecutor(RolloutExecutor):
    """A RolloutExecutor (same kwargs) with a background producer; see the module docstring."""

    def __init__(self, **base: Any) -> None:
        """The kwargs of RolloutExecutor; the async settings come with start_producer()."""
        super().__init__(**base)
        self.bound = StalenessBound()
        self.partial_rollout = True
        self.buffer = SampleBuffer(self.bound)
        self.clock = BusyClock()
        self._produce_wake = asyncio.Event()
        self._batch_wake = asyncio.Event()
        self._producer: asyncio.Task[None] | None = None
        self._running: dict[int, asyncio.Task[None]] = {}
        self._held = False
        self._version = 0
        self._taken_groups = 0
        self._position, self._taken_ids = 0, set[int]()  # the data position (data_position())
        self._counts = {"samples_retried": 0, "samples_resumed": 0, "samples_lost": 0, "groups_generated": 0,
                        "groups_filtered": 0}  # fmt: skip
        self.dynamic_sampling = False
        self.mask_offpolicy_in_partial_rollout = False
        self._lost_errors: list[str] = []
        self._started_at = 0.0

    # ---- the job's side --------------------------------------------------------------------------------

    async def start_producer(
        self, groups_per_batch: int, samples_per_prompt: int, target_len: int = 4, data_seed: int = 0,
        max_staleness: int = 1, on_stale: OnStale = "wait", partial_rollout: bool = True,
        max_buffered_groups: int | None = None, next_group: int = 0, version: int = 0,
        skip_groups: list[int] | None = None, dynamic_sampling: bool = False,
        mask_offpolicy_in_partial_rollout: bool = False,
    ) -> dict[str, Any]:  # fmt: skip
        """Start generating groups ``next_group, next_group + 1, ...`` but ``skip_groups`` (the data position, as
        ``async_stats()["data_position"]`` gives it) with the engines at
        weight version ``version`` (batch ``b`` trains at version ``b``, so ``version`` batches were taken).
        ``max_staleness``/``on_stale``:
        the bound (StalenessBound). ``partial_rollout``: resume requests aborted by a weight update (else start
        them over). ``max_buffered_groups``: finished plus in-flight groups the producer may hold (default:
        ``max_staleness + 1`` batches)."""
        if self._producer is not None:
            raise RuntimeError("the producer is running already; call stop_producer() first")
        if groups_per_batch < 1 or samples_per_prompt < 2:
            raise ValueError(f"need groups_per_batch >= 1 and samples_per_prompt >= 2, got "
                             f"{groups_per_batch}, {samples_per_prompt}")  # fmt: skip
        self.bound = self.buffer.bound = StalenessBound(max_staleness, on_stale)
        self.partial_rollout = partial_rollout
        self.dynamic_sampling = dynamic_sampling
        self.mask_offpolicy_in_partial_rollout = mask_offpolicy_in_partial_rollout
        self.groups_per_batch, self.samples_per_prompt = groups_per_batch, samples_per_prompt
        self.plan = PromptPlan(groups_per_batch, target_len=target_len, data_seed=data_seed, tokenizer=self.tokenizer)
        self._next_group, self._version, self._taken_groups = next_group, version, version * groups_per_batch
        self._position, self._taken_ids = next_group, {g for g in skip_groups or [] if g >= next_group}
        # twice what max_concurrency requests fill (the HTTP connector holds the rest back): no gap when a group ends
        self.max_in_flight_groups = max(2, 2 * self.max_concurrency // samples_per_prompt)
        self.capacity = max_buffered_groups or (max_staleness + 1) * groups_per_batch
        self._started_at = time.monotonic()
        self._producer = asyncio.create_task(self._produce(), name="async-rollout-producer")
        return self.async_stats()

    async def next_batch(self, current_version: int, timeout_s: float = 600.0) -> dict[str, Any]:
        """The next ``groups_per_batch`` groups the trainer at ``current_version`` may train on, as DP shards."""
        deadline = time.monotonic() + timeout_s
        while (groups := self.buffer.take(self.groups_per_batch, current_version)) is None:
            self._poke()
            if self._producer is None or self._producer.done():
                error = self._producer.exception() if self._producer and not self._producer.cancelled() else None
                raise RuntimeError(f"the rollout producer is not running (start_producer first): {error!r}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no batch within {timeout_s}s: {self.async_stats()}")
            self._batch_wake.clear()
            await _wait(self._batch_wake, min(1.0, deadline - time.monotonic()))
        self._taken_groups += len(groups)
        self._consumed([g.group_id for g in groups])
        self._poke()
        return self._batch(groups, current_version)

    def _consumed(self, group_ids: list[int]) -> None:
        """These groups are done with (trained, or filtered out): the data position moves past them."""
        self._taken_ids.update(group_ids)
        while self._position in self._taken_ids:
            self._taken_ids.discard(self._position)
            self._position += 1

    @method(control_plane=True)
    def updating_weights(self) -> None:
        """The engines are paused for a weight update: their time stops counting as busy."""
        self.clock.pause()

    async def set_version(self, version: int) -> None:
        """The engines now serve ``version`` (after a push); generation counts as busy again."""
        self._version = version
        self.clock.resume()
        self._poke()

    async def hold(self, timeout_s: float = 300.0) -> int:
        """Start no new group and wait until the groups in flight finish (on the weights they started with);
        returns how many there were. :meth:`release` starts the producer again."""
        self._held = True
        running = list(self._running.values())
        if running:
            await asyncio.wait(running, timeout=timeout_s)
        return len(running)

    async def release(self) -> None:
        self._held = False
        self._poke()

    async def stop_producer(self) -> dict[str, Any]:
        """Stop generating (groups still in flight are cancelled and not counted as lost); returns the stats."""
        tasks = [t for t in (self._producer, *self._running.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        stats = self.async_stats()
        self._producer = None
        return stats

    @method(control_plane=True)
    def async_stats(self) -> dict[str, Any]:
        wall = time.monotonic() - self._started_at if self._started_at else 0.0
        return {
            **self._counts,
            "samples_dropped_stale": self.buffer.dropped_stale_samples,
            "max_staleness_seen": self.buffer.max_staleness_seen,
            "groups_buffered": len(self.buffer.groups),
            "groups_in_flight": len(self._running),
            "next_group": getattr(self, "_next_group", 0),
            "data_position": self.data_position(),
            "busy_s": self.clock.total(),
            "wall_s": wall,
            "lost_errors": self._lost_errors[-5:],
        }

    def data_position(self) -> dict[str, Any]:
        """Where a resumed run starts so that no group is lost or trained twice: every group below ``next_group``
        was taken by the trainer, and so were ``skip_groups`` above it (groups in flight or buffered were not)."""
        return {"next_group": self._position, "skip_groups": sorted(self._taken_ids)}

    # ---- the producer ------------------------------------------------------------------------------------

    def _poke(self) -> None:
        self._produce_wake.set()
        self._batch_wake.set()

    def _may_start(self) -> bool:
        queued = len(self.buffer.groups) + len(self._running)
        batch = (self._taken_groups + queued) // self.groups_per_batch
        return (not self._held and len(self._running) < self.max_in_flight_groups and queued < self.capacity
                and self.bound.may_start(batch, self._version))  # fmt: skip

    async def _produce(self) -> None:
        while True:
            while self._may_start():
                group_id, self._next_group = self._next_group, self._next_group + 1
                if group_id in self._taken_ids:
                    continue  # trained before the resume
                task = asyncio.create_task(self._group(group_id), name=f"rollout-group-{group_id}")
                self._running[group_id] = task
                task.add_done_callback(lambda _t, g=group_id: (self._running.pop(g, None), self._poke()))
            self._produce_wake.clear()
            await _wait(self._produce_wake, 1.0)

    async def _group(self, group_id: int) -> None:
        try:
            await self._generate_group(group_id)
        except Exception as exc:  # a reward function or a prompt that fails: counted, never silently dropped
            self._lose(group_id, self.samples_per_prompt, exc)

    def _lose(self, group_id: int, count: int, error: BaseException) -> None:
        self._counts["samples_lost"] += count
        self._lost_errors.append(f"group {group_id}: {error!r}")
        logger.error("rollout group %d: %d sample(s) lost: %r", group_id, count, error)

    async def _generate_group(self, group_id: int) -> None:
        prompt = self.plan.group(group_id)
        prompt_ids = self._prompt_ids(group_id, prompt)
        session = self._client()
        n = self.samples_per_prompt

        def params(index: int) -> dict[str, Any]:
            return {**self.sampling_params, **sampling_seed(self.seed, self.plan.position(group_id), n, index)}

        results = await asyncio.gather(*(generate_sample(
            session, self._router_url, prompt_ids, params(j), partial_rollout=self.partial_rollout,
            request_timeout_s=self.request_timeout_s, deadline_s=self.retry_deadline_s, clock=self.clock,
            what=f"rollout sample {j} of group {group_id}") for j in range(n)), return_exceptions=True)  # fmt: skip
        failed = [r for r in results if isinstance(r, BaseException)]
        for error in failed:
            if isinstance(error, asyncio.CancelledError):
                raise error
        if failed:  # counted and reported, never silently dropped
            self._lose(group_id, len(failed), failed[0])
            return
        samples = [r for r in results if not isinstance(r, BaseException)]
        rewards = [await self._score(prompt_ids, s.output_ids, prompt) for s in samples]
        self._counts["samples_retried"] += sum(1 for s in samples if s.resent)
        self._counts["samples_resumed"] += sum(1 for s in samples if s.resumed)
        self._counts["groups_generated"] += 1
        if self.dynamic_sampling and not informative_groups(rewards, n)[0]:
            self._counts["groups_filtered"] += 1  # the producer starts another group in its place
            self._consumed([group_id])
            return
        self.buffer.put(GroupRecord(group_id, prompt_ids, samples, rewards))

    def _batch(self, groups: list[GroupRecord], current_version: int) -> dict[str, Any]:
        n = self.samples_per_prompt
        samples = [s for g in groups for s in g.samples]
        rewards = [r for g in groups for r in g.rewards]
        completions = [Completion(s.output_ids, s.logprobs, s.finish_reason, s.token_versions[-1] if s.token_versions
                                  else None, s.requests) for s in samples]  # fmt: skip
        advantages = self._advantages(rewards, n, [len(s.output_ids) for s in samples])
        prompt_ids = [g.prompt_ids for g in groups]
        stats = {
            **self.async_stats(),
            "prompts": len(groups),
            "samples": len(samples),
            "mean_reward": sum(rewards) / len(rewards),
            "tokens_generated": sum(len(s.output_ids) for s in samples),
            "staleness": max(current_version - g.oldest_version() for g in groups),
            "group_ids": [g.group_id for g in groups],
            "weight_versions": sorted({v for s in samples for v in s.token_versions}),
        }
        shards = []
        for rank, rows in enumerate(balanced_ranges(len(samples), self.dp_size)):
            shard = self._shard(rows, n, prompt_ids, completions, rewards, advantages)
            if self.mask_offpolicy_in_partial_rollout:
                shard["loss_mask"] = [newest_version_mask(mask, samples[i].token_versions)
                                      for mask, i in zip(shard["loss_mask"], rows, strict=True)]  # fmt: skip
            shard["token_weight_versions"] = [samples[i].token_versions for i in rows]
            shard["version_lags"] = [[current_version - version_number(v) for v in samples[i].token_versions]
                                     for i in rows]  # fmt: skip
            shard["group_ids"] = [groups[i // n].group_id for i in rows]
            shards.append(put({**shard, **training_fields(self.sampling_params), "dp_rank": rank,
                               "dp_size": self.dp_size, "stats": stats}))  # fmt: skip
        self._last_stats = stats
        return {"shards": shards, "stats": stats}


def newest_version_mask(loss_mask: list[int], versions: list[str]) -> list[int]:
    """``loss_mask`` with 0 on the response tokens (the last ``len(versions)``) not made by the newest version."""
    if not versions:
        return loss_mask
    start = len(loss_mask) - len(versions)
    return loss_mask[:start] + [m if v == versions[-1] else 0 for m, v in zip(loss_mask[start:], versions, strict=True)]


async def _wait(event: asyncio.Event, timeout_s: float) -> None:
    try:
        await within(event.wait(), timeout_s)  # within clamps a past deadline to 0
    except TimeoutError:
        pass
