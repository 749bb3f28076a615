"""Several policies in one launch: each its own trainer group, engine pool, router, rollout and weight versions.

Nothing is shared, so one policy's engine death or failure never stops the others."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from actors.demo.loop import WeightSync
from actors.job_args import takes_settings
from actors.rollout.prompt_plan import PromptPlan
from actors.trainer.group import TrainerGroup
from runtime import ActorHandle, wait

REPAIR_POLL_S = 1.0


@dataclass(frozen=True)
class TwoPolicySettings:
    """``[job.args]``."""

    policies: list[str] = field(default_factory=lambda: ["a", "b"])
    iterations: int = 3
    prompts_per_iteration: int = 4
    samples_per_prompt: int = 4
    target_len: int = 4
    seed: int = 0
    step_timeout_s: float = 600.0
    kill_engine: str | None = None

    def __post_init__(self) -> None:
        if len(set(self.policies)) != len(self.policies) or not self.policies:
            raise ValueError(f"job.args.policies must be distinct names, got {self.policies}")
        if self.kill_engine is not None and self.kill_engine not in self.policies:
            raise ValueError(f"job.args.kill_engine={self.kill_engine!r} is not one of policies {self.policies}")
        if self.iterations < 1 or self.samples_per_prompt < 2 or self.prompts_per_iteration < 1:
            raise ValueError("job.args: iterations and prompts_per_iteration >= 1, samples_per_prompt >= 2")


@dataclass
class Policy:
    """One policy's actors and what its loop did."""

    name: str
    trainer: TrainerGroup
    controller: ActorHandle
    rollout: ActorHandle
    rewards: list[float] = field(default_factory=list)
    status: str = "not started"
    killed_engine: int | None = None


# Each policy p runs the GRPO loop of actors/demo/loop.py in its own thread over its pools trainer-{p},
# inference-{p} and rollout-{p}, with its own weight versions ({p}-v0, {p}-v1, ...); an engine death is its
# controller's business (it restarts the engine, the rollout retries), and a policy that fails for good is reported
# while the others run to their end.
def run_policy(policy: Policy, settings: TwoPolicySettings) -> None:
    """The GRPO loop of one policy; its outcome goes to ``policy.status`` (never raises)."""
    try:
        sync = WeightSync(policy.trainer, policy.controller)
        plan = PromptPlan(settings.prompts_per_iteration, target_len=settings.target_len, data_seed=settings.seed)
        sync.update(f"{policy.name}-v0")
        for iteration in range(1, settings.iterations + 1):
            prompts = plan.batch(iteration - 1)
            result = generate_repairing(policy, sync, f"{policy.name}-v{iteration - 1}", prompts, settings)
            metrics = policy.trainer.train_on_shards(result["shards"], timeout_s=settings.step_timeout_s)
            for shard in result["shards"]:
                shard.free()
            version = f"{policy.name}-v{iteration}"
            sync.push(version)
            policy.rewards.append(float(result["stats"]["mean_reward"]))
            print(f"[policy {policy.name}] {iteration}/{settings.iterations} reward {policy.rewards[-1]:.3f} "
                  f"loss {metrics['loss']:.4f} weights {version}", flush=True)  # fmt: skip
            if iteration == 1 and settings.kill_engine == policy.name:
                policy.killed_engine = kill_one_engine(policy)
        policy.status = "ok"
    except Exception as exc:  # one policy's failure is reported; the others go on
        policy.status = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        print(f"[policy {policy.name}] {policy.status}", flush=True)


def generate_repairing(
    policy: Policy, sync: WeightSync, version: str, prompts: list[dict[str, Any]], settings: TwoPolicySettings
) -> dict[str, Any]:
    """The rollout's result; meanwhile an engine its controller restarted (it waits for weights: the trainer pushes
    them directly, so the controller holds no copy) is given the current weights ``version`` again, else the
    rollout would wait for an engine that waits for the next weight push."""
    call = policy.rollout.generate(prompts, settings.samples_per_prompt)
    deadline = time.monotonic() + settings.step_timeout_s
    while True:
        ready, _ = wait([call], timeout=REPAIR_POLL_S)
        if ready:
            return call.result(timeout=0)
        if time.monotonic() > deadline:
            call.cancel()
            raise TimeoutError(f"policy {policy.name}: the rollout took over {settings.step_timeout_s}s")
        cells = policy.controller.cells().result(timeout=30)
        if any(c["state"] == "pending_weights" for c in cells):
            print(f"[policy {policy.name}] a restarted engine gets weights {version} again", flush=True)
            sync.update(version)


# kill_engine = "p" (fault injection, for the test and to watch it happen): SIGKILL one of p's engines after
# its first iteration.
def kill_one_engine(policy: Policy) -> int:
    """SIGKILL one serving engine of ``policy`` (it runs on this machine in the CPU example); returns its pid."""
    cells = [c for c in policy.controller.cells().result(timeout=30) if c["state"] == "serving" and c["pid"]]
    if not cells:
        raise RuntimeError(f"policy {policy.name}: no serving engine to kill")
    os.kill(cells[0]["pid"], signal.SIGKILL)
    print(f"[policy {policy.name}] killed engine {cells[0]['id']} (pid {cells[0]['pid']}) with SIGKILL", flush=True)
    return int(cells[0]["pid"])


def summary(policy: Policy) -> dict[str, Any]:
    restarts = None
    version = None
    try:
        version = policy.controller.weight_version().result(timeout=30)
        restarts = sum(int(c.get("restarts", 0)) for c in policy.controller.cells().result(timeout=30))
    except Exception as exc:
        version = f"unknown ({type(exc).__name__})"
    return {
        "status": policy.status, "iterations": len(policy.rewards),
        "reward_first": policy.rewards[0] if policy.rewards else None,
        "reward_last": policy.rewards[-1] if policy.rewards else None,
        "weight_version": version, "engine_restarts": restarts, "killed_engine_pid": policy.killed_engine,
    }  # fmt: skip


@takes_settings(TwoPolicySettings, "settings")
def main(ctx: Any, settings: TwoPolicySettings) -> int:
    """Entrypoint for ``[job] entrypoint = "actors.demo.two_policies:main"``; ``ctx`` is a launcher.JobContext."""
    policies = []
    for name in settings.policies:
        (controller,) = ctx.handles(f"inference-{name}")
        (rollout,) = ctx.handles(f"rollout-{name}")
        trainer = TrainerGroup.from_handles(ctx.handles(f"trainer-{name}"))
        policies.append(Policy(name, trainer, controller, rollout))
    started = time.monotonic()
    print(f"[two-policies] starting the engines of {settings.policies} ...", flush=True)
    for policy in policies:
        policy.controller.start().result(timeout=300)
        print(f"[two-policies] policy {policy.name}: router {policy.controller.router_url().result(30)}", flush=True)
    try:
        threads = [threading.Thread(target=run_policy, args=(p, settings), name=f"policy-{p.name}") for p in policies]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        result = {"policies": {p.name: summary(p) for p in policies}, "elapsed_s": round(time.monotonic() - started, 1)}
    finally:
        for policy in policies:
            policy.controller.shutdown().result(timeout=60)
    print("RESULT " + json.dumps(result), flush=True)
    return 0 if all(p.status == "ok" for p in policies) else 1
