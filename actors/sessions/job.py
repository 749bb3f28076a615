"""The agentic GRPO job: calculator-agent episodes through the launch's session servers, trained, weights pushed.

``[job] entrypoint = "actors.sessions.job:main"`` with the pools ``trainer`` (TrainerActor ranks), ``inference``
(an InferenceController), ``sessions`` (session servers, actors/sessions/pool.py) and ``rollout``
(:class:`actors.sessions.rollout.AgentRollout` with ``session_pool = "sessions"``); examples/agent-sessions-cpu.toml
runs it on this machine. Each iteration: episodes (one session each, multi-turn, tool output masked), one train
step on the sessions' records, a weight push (``v1``, ``v2``, ...). The last console line is ``RESULT {json}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from actors.demo.loop import WeightSync
from actors.job_args import job_settings
from actors.sessions.calculator import make_questions
from actors.trainer.group import TrainerGroup


@dataclass(frozen=True)
class AgentJobSettings:
    """``[job.args]``."""

    iterations: int = 3
    prompts_per_iteration: int = 4
    samples_per_prompt: int = 4
    seed: int = 0
    step_timeout_s: float = 600.0


def main(ctx: Any) -> int:
    """Entrypoint; ``ctx`` is a launcher.JobContext."""
    settings = job_settings(AgentJobSettings, ctx.args, "settings")
    trainer = TrainerGroup.from_handles(ctx.handles("trainer"))
    (controller,) = ctx.handles("inference")
    (rollout,) = ctx.handles("rollout")
    controller.start().result(timeout=300)
    totals = {"leaves": 0, "turns": 0, "tool_calls": 0, "samples_retried": 0, "samples_lost": 0}
    rewards: list[float] = []
    try:
        sync = WeightSync(trainer, controller)
        sync.update("v0")
        for iteration in range(1, settings.iterations + 1):
            prompts = make_questions(settings.prompts_per_iteration, seed=settings.seed * 100_003 + iteration)
            result = rollout.generate(prompts, settings.samples_per_prompt).result(timeout=settings.step_timeout_s)
            stats = result["stats"]
            metrics = trainer.train_on_shards(result["shards"], timeout_s=settings.step_timeout_s)
            for shard in result["shards"]:
                shard.free()
            sync.push(f"v{iteration}")
            rewards.append(float(stats["mean_reward"]))
            totals["turns"] += int(stats["requests"])
            for key in ("leaves", "tool_calls", "samples_retried", "samples_lost"):
                totals[key] += int(stats[key])
            print(f"[agent] {iteration}/{settings.iterations} reward {rewards[-1]:.3f} loss {metrics['loss']:.4f} "
                  f"leaves {stats['leaves']} turns {stats['requests']} tool calls {stats['tool_calls']} "
                  f"trained tokens {metrics['tokens']:.0f}", flush=True)  # fmt: skip
        version = controller.weight_version().result(timeout=30)
    finally:
        controller.shutdown().result(timeout=60)
    result_line = {"iterations": len(rewards), "reward_first": rewards[0], "reward_last": rewards[-1],
                   "weight_version": version, **totals}  # fmt: skip
    print("RESULT " + json.dumps(result_line), flush=True)
    return 0
