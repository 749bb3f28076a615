"""The agentic GRPO job: calculator-agent episodes through the launch's session servers, trained, weights pushed.

``examples/agent-sessions-cpu.toml`` runs it on this machine."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from typing import Any

from actors.demo.loop import WeightSync
from actors.job_args import takes_settings
from actors.job_roles import rl_roles
from actors.rollout.staleness import version_number
from actors.sessions.calculator import make_questions


@dataclass(frozen=True)
class AgentJobSettings:
    """``[job.args]``."""

    iterations: int = 3
    prompts_per_iteration: int = 4
    samples_per_prompt: int = 4
    seed: int = 0
    step_timeout_s: float = 600.0
    max_staleness: int = 0  # iterations of episodes run ahead of the trainer; 0: synchronous

    def __post_init__(self) -> None:
        if not 0 <= self.max_staleness < self.iterations:
            raise ValueError(f"[job.args] max_staleness = {self.max_staleness}: give 0 (synchronous) up to "
                             f"iterations - 1 = {self.iterations - 1}")  # fmt: skip


# Pools: trainer, inference, sessions (session servers) and rollout (AgentRollout). Each iteration: episodes (one
# session each, multi-turn, tool output masked), a train step on the sessions' records, a weight push. With
# max_staleness the next episodes run while the trainer trains, so a push lands mid-episode: the controller's abort
# cuts the turn in flight and the session server sends it again on the new weights (a turn is recorded only once
# answered whole); each record keeps its turns' versions, and a batch is trained only when its oldest turn is within
# max_staleness of the trainer's version.
@takes_settings(AgentJobSettings, "settings")
def main(ctx: Any, settings: AgentJobSettings) -> int:
    """Entrypoint; ``ctx`` is a launcher.JobContext."""
    trainer, controller, rollout = rl_roles(ctx)
    controller.start().result(timeout=300)
    totals = {"leaves": 0, "turns": 0, "tool_calls": 0, "samples_retried": 0, "samples_lost": 0,
              "max_staleness_seen": 0}  # fmt: skip
    rewards: list[float] = []
    pending: deque[Any] = deque()  # episodes submitted, oldest first
    submitted = 0

    def submit() -> None:  # the episodes of the next iteration, on whatever weights the engines have now
        nonlocal submitted
        submitted += 1
        prompts = make_questions(settings.prompts_per_iteration, seed=settings.seed * 100_003 + submitted)
        pending.append(rollout.generate(prompts, settings.samples_per_prompt))

    try:
        sync = WeightSync(trainer, controller)
        sync.update("v0")
        submit()
        for iteration in range(1, settings.iterations + 1):
            result = pending.popleft().result(timeout=settings.step_timeout_s)
            while len(pending) < settings.max_staleness and submitted < settings.iterations:
                submit()  # runs while the trainer trains and pushes
            stats = result["stats"]
            staleness = iteration - 1 - min(version_number(v) for v in stats["weight_versions"])
            if staleness > settings.max_staleness:
                raise RuntimeError(f"iteration {iteration}: episodes {staleness} versions behind the trainer, "
                                   f"more than max_staleness = {settings.max_staleness}")  # fmt: skip
            metrics = trainer.train_on_shards(result["shards"], timeout_s=settings.step_timeout_s)
            for shard in result["shards"]:
                shard.free()
            sync.push(f"v{iteration}")
            rewards.append(float(stats["mean_reward"]))
            if not pending and submitted < settings.iterations:
                submit()  # synchronous: the next episodes start on the new weights
            totals["turns"] += int(stats["requests"])
            totals["max_staleness_seen"] = max(totals["max_staleness_seen"], staleness)
            for key in ("leaves", "tool_calls", "samples_retried", "samples_lost"):
                totals[key] += int(stats[key])
            print(f"[agent] {iteration}/{settings.iterations} reward {rewards[-1]:.3f} loss {metrics['loss']:.4f} "
                  f"leaves {stats['leaves']} turns {stats['requests']} tool calls {stats['tool_calls']} "
                  f"trained tokens {metrics['tokens']:.0f} staleness {staleness} "
                  f"retried {stats['samples_retried']} lost {stats['samples_lost']}", flush=True)  # fmt: skip
        version = controller.weight_version().result(timeout=30)
    finally:
        controller.shutdown().result(timeout=60)
    result_line = {"iterations": len(rewards), "reward_first": rewards[0], "reward_last": rewards[-1],
                   "weight_version": version, **totals}  # fmt: skip
    print("RESULT " + json.dumps(result_line), flush=True)
    return 0
