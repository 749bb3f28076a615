"""The demo's fully asynchronous variant (miles' ``train_async.py``): the engines keep generating while the trainer
trains; ``miles-launch examples/async-demo.toml`` runs it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from actors.demo.engine_busy import busy_fraction, generating_seconds
from actors.demo.loop import DemoSettings, WeightSync
from actors.demo.progress import IterationRecord, ProgressBoard
from actors.demo.result import mean_rewards, result_line
from actors.demo.run_state import RunCheckpoints, RunPoint
from actors.job_args import takes_settings
from actors.job_roles import rl_roles
from actors.rollout.executor import DEFAULT_SAMPLING_PARAMS
from actors.trainer.config import TrainerConfig
from actors.trainer.group import TrainerGroup, TrainerGroupError
from actors.trainer.objective_config import ObjectiveConfig, off_policy_problems
from runtime import ActorHandle

# Per iteration i: take a batch from the rollout's buffer (samples at most max_staleness versions older than the
# trainer's v{i-1}), train on it, push v{i} (the controller pauses the engines, the trainer posts, the engines go on).
# in_flight says what becomes of the requests a push finds running: "partial" (aborted, resumed as partial rollouts
# whose tokens keep the version that made them), "restart" (aborted, started over on the new weights), "finish" (no
# new request starts; the running ones finish on the old version, then the push) or "continue" (paused, not aborted,
# their later tokens from the new version). No colocation here: the engines never stop generating.
IN_FLIGHT = ("partial", "restart", "finish", "continue")
# in_flight -> the controller pause_modes it works with ("partial"/"restart" handle the requests "abort" aborts;
# "continue" lets them run through the push, which "retract" and "in_place" do: SGLang's pause_generation)
PAUSE_MODES_FOR = {"partial": ("abort",), "restart": ("abort",), "finish": ("abort", "retract", "in_place"),
                   "continue": ("retract", "in_place")}  # fmt: skip


@dataclass(frozen=True)
class AsyncDemoSettings(DemoSettings):
    """DemoSettings plus the async knobs (``[job.args]`` in examples/async-demo.toml)."""

    max_staleness: int = 1  # versions; 0: the synchronous loop
    on_stale: str = "wait"  # never start a sample that would be past the bound; "drop": drop those past it
    dynamic_sampling: bool = False  # drop groups whose rewards are all equal, generate others in their place
    mask_offpolicy_in_partial_rollout: bool = False  # train only the tokens of each sample's newest version
    in_flight: str = "partial"  # what a weight push does to running requests (module docstring)
    max_buffered_groups: int | None = None
    checkpoint_dir: str | None = None  # trainer checkpoints and the loop's position (actors/demo/run_state.py)
    checkpoint_every: int = 0  # iterations between checkpoints (0: none)
    resume: bool = False  # continue from the latest checkpoint in checkpoint_dir

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.in_flight not in IN_FLIGHT:
            raise ValueError(f"job.args.in_flight must be one of {IN_FLIGHT}, got {self.in_flight!r}")
        if self.colocate:
            raise ValueError("job.args.colocate: the async loop keeps the engines generating; use actors.demo:main")
        if self.max_staleness < 0 or self.on_stale not in ("drop", "wait"):
            raise ValueError(f"job.args: max_staleness >= 0 and on_stale 'drop' or 'wait', got "
                             f"{self.max_staleness}, {self.on_stale!r}")  # fmt: skip
        if (self.resume or self.checkpoint_every) and not self.checkpoint_dir:
            raise ValueError("job.args.resume and job.args.checkpoint_every need job.args.checkpoint_dir")


class TrainerFailed(RuntimeError):
    """A trainer rank died (or failed) mid-run; the message names it and the checkpoint to resume from."""


def _trainer_failed(iteration: int, error: Exception, point: RunPoint | None) -> TrainerFailed:
    where = (f"last checkpoint: {point.path} (iteration {point.iteration}); run again with job.args.resume = true "
             "to continue from it") if point else "no checkpoint yet (set job.args.checkpoint_every)"  # fmt: skip
    return TrainerFailed(f"the trainer failed at iteration {iteration}: {error}; {where}")


def run_async_loop(
    settings: AsyncDemoSettings, trainer: TrainerGroup, controller: ActorHandle, rollout: ActorHandle
) -> tuple[ProgressBoard, dict[str, Any]]:
    """Run the iterations; returns the board and the rollout's final stats."""
    timeout = settings.step_timeout_s
    board = ProgressBoard(settings.iterations)
    sync = WeightSync(trainer, controller, over_refs=settings.weight_sync == "refs")
    urls, router = controller.engine_urls().result(timeout=30), controller.router_url().result(timeout=30)
    pause_mode = controller.status().result(timeout=30)["pause_mode"]
    if pause_mode not in PAUSE_MODES_FOR[settings.in_flight]:
        raise ValueError(
            f"job.args.in_flight = {settings.in_flight!r} needs the inference pool's pause_mode to be one of "
            f"{PAUSE_MODES_FOR[settings.in_flight]}, got {pause_mode!r}: set [pools.worker.kwargs] pause_mode or "
            'in_flight ("continue" goes with "retract"/"in_place", "partial"/"restart" with "abort")'
        )
    print(f"[async] engines: {urls}; router {router}", flush=True)
    checkpoints = RunCheckpoints(settings.checkpoint_dir) if settings.checkpoint_dir else None
    point, step = checkpoints.restore(trainer, timeout) if checkpoints and settings.resume else (None, 0)
    first = point.iteration + 1 if point else 1
    if point:
        print(f"[async] resumed from {point.path}: iteration {point.iteration} done, weight version "
              f"v{point.weight_version}, data position {point.next_group} (+{len(point.skip_groups)} later groups "
              f"trained), trainer step {step} (optimizer state "
              "restored)", flush=True)  # fmt: skip
    sync.update(f"v{first - 1}")
    rollout.start_producer(
        settings.prompts_per_iteration, settings.samples_per_prompt, target_len=settings.target_len,
        data_seed=settings.seed, max_staleness=settings.max_staleness, on_stale=settings.on_stale,
        partial_rollout=settings.in_flight == "partial", max_buffered_groups=settings.max_buffered_groups,
        next_group=point.next_group if point else 0, version=first - 1,
        skip_groups=list(point.skip_groups) if point else None, dynamic_sampling=settings.dynamic_sampling,
        mask_offpolicy_in_partial_rollout=settings.mask_offpolicy_in_partial_rollout,
    ).result(timeout=60)  # fmt: skip
    print(f"[async] producer started: max_staleness={settings.max_staleness} ({settings.on_stale}), "
          f"in-flight requests at a push: {settings.in_flight} (pause_mode {pause_mode})", flush=True)  # fmt: skip
    board.header()
    generated_before = generating_seconds(urls)
    started = time.perf_counter()
    lost = 0
    for iteration in range(first, settings.iterations + 1):
        began = time.perf_counter()
        batch = rollout.next_batch(iteration - 1, timeout).result(timeout=timeout + 30)
        waited = time.perf_counter() - began
        stats: dict[str, Any] = batch["stats"]
        board.tokens += int(stats["tokens_generated"])
        try:
            metrics = trainer.train_on_shards(batch["shards"], timeout_s=timeout)
            trained = time.perf_counter() - began - waited
            for shard in batch["shards"]:
                shard.free()
            push_started = time.perf_counter()
            _push(settings, sync, rollout, iteration)
            pushed = time.perf_counter() - push_started
            if checkpoints and settings.checkpoint_every and iteration % settings.checkpoint_every == 0:
                point = checkpoints.save(trainer, iteration, rollout.async_stats().result(10)["data_position"], timeout)
        except TrainerGroupError as exc:
            raise _trainer_failed(iteration, exc, point) from exc
        elapsed = time.perf_counter() - began
        board.add(IterationRecord(
            iteration=iteration, reward=float(stats["mean_reward"]), loss=float(metrics["loss"]),
            tokens_per_s=stats["tokens_generated"] / elapsed, rollout_s=waited, train_s=trained, sync_s=pushed,
            metrics=dict(metrics),
        ))  # fmt: skip
        if stats["samples_lost"] > lost:
            lost = stats["samples_lost"]
            print(f"[async] WARNING: {lost} sample(s) lost so far: {stats['lost_errors']}", flush=True)
        board.wall_s = time.perf_counter() - started
    final = rollout.stop_producer().result(timeout=60)
    generated = generating_seconds(controller.engine_urls().result(timeout=30))
    board.engine_busy = busy_fraction(generated_before, generated, board.wall_s)
    return board, final


def _push(settings: AsyncDemoSettings, sync: WeightSync, rollout: ActorHandle, iteration: int) -> None:
    """Push ``v{iteration}``: pause (or, "finish", let the requests in flight end first), update, continue."""
    timeout = settings.step_timeout_s
    if settings.in_flight == "finish":
        rollout.hold(timeout).result(timeout=timeout + 30)
    rollout.updating_weights().result(timeout=30)
    sync.update(f"v{iteration}")
    rollout.set_version(iteration).result(timeout=30)
    if settings.in_flight == "finish":
        rollout.release().result(timeout=30)


def finish_async(board: ProgressBoard, final: dict[str, Any]) -> int:
    """Summarise; exit 1 when samples were lost or the reward did not rise."""
    first, last = mean_rewards(board)
    print(f"[async] mean reward {first:.3f} (first 2 iterations) → {last:.3f} (last 2)", flush=True)
    print(f"[async] samples: {final['samples_retried']} retried ({final['samples_resumed']} resumed as partial "
          f"rollouts), {final['samples_dropped_stale']} dropped as stale, {final['samples_lost']} lost; "
          f"max staleness {final['max_staleness_seen']}", flush=True)  # fmt: skip
    keys = ("max_staleness_seen", "samples_dropped_stale", "samples_retried", "samples_resumed", "samples_lost",
            "groups_filtered")  # fmt: skip
    print(result_line(board, mode="async", engine_busy_fraction=board.engine_busy, busy_s=float(final["busy_s"]),
                      wall_s=board.wall_s, **{k: final[k] for k in keys}), flush=True)  # fmt: skip
    return 1 if final["samples_lost"] or last <= first else 0


def refuse_uncorrected(settings: AsyncDemoSettings, trainer: TrainerGroup, rollout: ActorHandle) -> str:
    """Raise OffPolicyRefused when this run would train on stale or partial rollouts without a behaviour
    correction (or correct inexactly); returns a one-line description of the objective otherwise."""
    objective = trainer.objective()
    _refuse(settings, objective, rollout.sampling_settings().result(timeout=30))
    corrections = [name for name in ("use_tis", "decoupled", "use_rollout_logprobs") if getattr(objective, name)]
    return f"objective {objective.policy_loss}" + (f" with {', '.join(corrections)}" if corrections else "")


def refuse_uncorrected_before_start(settings: AsyncDemoSettings, pools: Mapping[str, Mapping[str, Any]]) -> None:
    """The same refusal before anything starts (miles-launch's checks), from the ``trainer`` and ``rollout`` pools'
    kwargs in hosts.toml; a launch whose pools are not those (or whose kwargs are wrong, which the launcher
    reports itself) is judged by :func:`refuse_uncorrected` once its actors are up."""
    trainer, rollout = pools.get("trainer", {}), pools.get("rollout")
    if "config" not in trainer or rollout is None:
        return
    try:
        objective = TrainerConfig.model_validate(trainer["config"]).objective
    except ValueError:
        return
    _refuse(settings, objective, dict(rollout.get("sampling_params") or DEFAULT_SAMPLING_PARAMS))


def _refuse(settings: AsyncDemoSettings, objective: ObjectiveConfig, sampling: dict[str, Any]) -> None:
    partial = settings.in_flight in ("partial", "continue")  # a sample's tokens come from several versions
    problems = off_policy_problems(objective, max_staleness=settings.max_staleness, partial_rollout=partial,
                                   sampling_params=sampling)  # fmt: skip
    if problems:
        raise OffPolicyRefused("; ".join(problems) + " (the trainer pool's [pools.worker.kwargs.config.objective])")


class OffPolicyRefused(ValueError):
    """The run would train on a biased gradient: the message names the objective's options that correct it."""


@takes_settings(AsyncDemoSettings, "async demo settings", check=refuse_uncorrected_before_start)
def main(ctx: Any, settings: AsyncDemoSettings) -> int:
    """Entrypoint for ``[job] entrypoint = "actors.demo.async_loop:main"``; ``ctx`` is a launcher.JobContext."""
    trainer, controller, rollout = rl_roles(ctx)
    print(f"[async] {refuse_uncorrected(settings, trainer, rollout)}", flush=True)
    print("[async] starting the router and the engines ...", flush=True)
    controller.start().result(timeout=300)
    try:
        board, final = run_async_loop(settings, trainer, controller, rollout)
    finally:
        controller.shutdown().result(timeout=60)
    return finish_async(board, final)
