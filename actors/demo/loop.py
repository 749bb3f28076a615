"""The GRPO loop: generate → reward → train → push weights → repeat, over actors the launcher started."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.demo.engine_busy import busy_fraction, generating_seconds
from actors.demo.progress import IterationRecord, ProgressBoard
from actors.demo.ref_group import RefGroup
from actors.demo.result import mean_rewards, result_line
from actors.rollout.prompt_plan import PromptPlan
from actors.tokenizer import tokenizer_for
from actors.trainer.group import TrainerGroup
from runtime import ActorHandle

log = logging.getLogger(__name__)

WEIGHT_SYNCS = ("http", "refs")


@dataclass(frozen=True)
class DemoSettings:
    """The demo job's knobs (``[job.args]`` in hosts.toml)."""

    iterations: int = 12
    prompts_per_iteration: int = 16
    samples_per_prompt: int = 8
    target_len: int = 4
    seed: int = 0
    plot_path: str = "runs/demo/reward.png"
    step_timeout_s: float = 600.0
    model_path: str | None = None  # a Hugging Face directory: its tokenizer makes the prompts' labels
    colocate: bool = False  # engines share the trainer's GPUs: they release their memory while it trains
    weight_sync: str = "http"  # "http": the trainer posts tensors; "refs": engines pull over a collective group

    def __post_init__(self) -> None:
        for name in ("iterations", "prompts_per_iteration", "samples_per_prompt", "target_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"job.args.{name} must be at least 1, got {getattr(self, name)}")
        if self.samples_per_prompt < 2:
            raise ValueError("job.args.samples_per_prompt must be at least 2: GRPO compares samples of one prompt")
        if self.weight_sync not in WEIGHT_SYNCS:
            raise ValueError(f"job.args.weight_sync {self.weight_sync!r} is not one of {list(WEIGHT_SYNCS)}")


class WeightSync:
    """Trainer → engines: lock and pause through the controller, the trainer posts, then continue.

    ``colocate``: the engines release their memory (every tag) before the train step; after it they take the
    weights memory back, the new weights are pushed, then they take the KV cache back (SGLang's memory saver,
    in the order miles uses; see actors/inference/memory.py). ``over_refs``: the engines pull the weights over a
    collective group instead (:mod:`actors.demo.ref_group`)."""

    def __init__(
        self, trainer: TrainerGroup, controller: ActorHandle, *, colocate: bool = False, over_refs: bool = False
    ) -> None:
        self.trainer = trainer
        self.controller = controller
        self.colocate = colocate
        self.refs = RefGroup(trainer) if over_refs else None

    def before_train(self) -> None:
        if self.colocate:
            self.controller.release_memory().result(timeout=120)

    def push(self, version: str) -> float:
        started = time.perf_counter()
        if self.colocate:
            self.controller.resume_memory(["weights"]).result(timeout=120)
        self.update(version)
        if self.colocate:
            self.controller.resume_memory(["kv_cache", "cuda_graph"]).result(timeout=120)
        return time.perf_counter() - started

    def update(self, version: str) -> None:
        update = self.controller.start_update_weights().result(timeout=120)
        try:
            if self.refs is not None:
                self.refs.push(update.get("engine_handles"), version)
            else:
                self.trainer.push_weights(update["engine_urls"], version, flush_cache=update.get("flush_cache", True))
        except BaseException:
            self.controller.abort_update_weights(update["token"]).result(timeout=60)
            raise
        self.controller.end_update_weights(update["token"], version).result(timeout=120)

    def close(self) -> None:
        if self.refs is not None:
            self.refs.close()


def run_loop(
    settings: DemoSettings, trainer: TrainerGroup, controller: ActorHandle, rollout: ActorHandle
) -> ProgressBoard:
    """Run ``settings.iterations`` iterations; returns the board (history) for the caller to check and plot."""
    board = ProgressBoard(settings.iterations)
    sync = WeightSync(trainer, controller, colocate=settings.colocate, over_refs=settings.weight_sync == "refs")
    # the asynchronous rollout takes its prompts from the same plan (actors/rollout/prompt_plan.py)
    plan = PromptPlan(settings.prompts_per_iteration, target_len=settings.target_len, data_seed=settings.seed,
                      tokenizer=tokenizer_for(settings.model_path))  # fmt: skip
    print(f"[demo] engines: {controller.engine_urls().result(timeout=30)}; router {controller.router_url().result(30)}")
    started = time.perf_counter()
    sync.update("v0")
    first_sync = time.perf_counter() - started
    how = "over collective refs" if sync.refs is not None else "over HTTP"
    print(f"[demo] initial weights pushed to the engines {how} in {first_sync:.2f}s", flush=True)
    board.header()
    generated_before = generating_seconds(controller.engine_urls().result(timeout=30))
    loop_started = time.perf_counter()
    for iteration in range(1, settings.iterations + 1):
        prompts = plan.batch(iteration - 1)
        started = time.perf_counter()
        rollout_result = rollout.generate(prompts, settings.samples_per_prompt).result(timeout=settings.step_timeout_s)
        rollout_s = time.perf_counter() - started
        stats: dict[str, Any] = rollout_result["stats"]
        board.retries += int(stats.get("retries", 0))
        board.tokens += int(stats.get("tokens_generated", 0))
        started = time.perf_counter()
        sync.before_train()
        metrics = trainer.train_on_shards(rollout_result["shards"], timeout_s=settings.step_timeout_s)
        train_s = time.perf_counter() - started
        for shard in rollout_result["shards"]:
            shard.free()
        sync_s = sync.push(f"v{iteration}")
        board.add(IterationRecord(
            iteration=iteration, reward=float(stats["mean_reward"]),
            loss=float(metrics["loss"]), tokens_per_s=float(stats.get("tokens_per_s", 0.0)),
            rollout_s=rollout_s, train_s=train_s, sync_s=sync_s, metrics=dict(metrics),
        ))  # fmt: skip
        board.wall_s = time.perf_counter() - loop_started
    generated = generating_seconds(controller.engine_urls().result(timeout=30))
    board.engine_busy = busy_fraction(generated_before, generated, board.wall_s)
    sync.close()
    return board


def finish(board: ProgressBoard, settings: DemoSettings) -> int:
    """Plot, summarise, and turn "did the reward rise" into an exit code."""
    path = board.plot(Path(settings.plot_path))
    first, last = mean_rewards(board)
    print(f"[demo] mean reward {first:.3f} (first 2 iterations) → {last:.3f} (last 2); plot: {path}", flush=True)
    if last <= first:
        print("[demo] the reward did not rise: try more iterations or a higher learning rate", flush=True)
    busy = sum(r.rollout_s for r in board.history)  # engines generate only inside rollout.generate here
    print(result_line(board, mode="sync", engine_busy_fraction=board.engine_busy, busy_s=busy, wall_s=board.wall_s,
                      samples_retried=board.retries), flush=True)  # fmt: skip
    return 1 if last <= first else 0
