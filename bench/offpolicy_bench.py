"""Off-policy correction on the demo's copy task: reward against trained samples at staleness 0, 2 and 4 with
partial rollouts, uncorrected and with each correction, plus the mismatch metrics; then (``--throughput``) the
synchronous and the asynchronous demo launched at equal iterations: wall time to the same reward.

Part 1 runs in-process, one subprocess per configuration (a trainer rank on gloo): the trainer's own weights are
kept as a snapshot per version, and the samples of iteration ``i`` are drawn from the snapshot ``staleness``
versions behind the trainer's, a partial rollout's later tokens from newer snapshots (up to the trainer's), each
token's logprob recorded as the engine's would be. So the behaviour policy is exactly known and the only
difference between the rows is the objective (actors/trainer/objectives.py). Engines, router and transport are
left out on purpose: part 2 measures those.

    python bench/offpolicy_bench.py [--iterations 24] [--staleness 0 2 4] [--throughput] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_common import launch_demo  # noqa: E402

OBJECTIVES: dict[str, dict[str, Any]] = {
    "uncorrected": {"policy_loss": "reinforce", "allow_uncorrected_off_policy": True},
    "tis": {"policy_loss": "reinforce", "use_tis": True, "tis_clip": 2.0},
    "icepop": {"policy_loss": "reinforce", "use_tis": True, "tis_mode": "mask", "tis_clip": 2.0, "tis_clip_low": 0.5},
    "ppo+tis": {"policy_loss": "ppo_clip", "use_tis": True, "tis_clip": 2.0, "num_steps_per_rollout": 2},
    "decoupled": {
        "policy_loss": "ppo_clip",
        "decoupled": True,
        "behav_imp_weight_cap": 5.0,
        "num_steps_per_rollout": 2,
    },
    "bypass": {"policy_loss": "ppo_clip", "use_rollout_logprobs": True, "num_steps_per_rollout": 2},
}
METRICS = ("train_rollout_logprob_abs_diff", "mismatch_k3_kl", "ess_ratio", "clipfrac")
PROMPTS, SAMPLES, TARGET_LEN = 16, 8, 4


def _sample(trainer: Any, snapshots: list[Any], prompts: list[list[int]], versions: list[int]) -> tuple[list, list]:
    """Sample SAMPLES responses per prompt, token ``j`` with the weights of version ``versions[j]``."""
    import torch

    from actors.trainer import model as gpt_model

    ids = torch.tensor([p for p in prompts for _ in range(SAMPLES)])
    logprobs: list[torch.Tensor] = []
    for version in versions:
        with snapshots[version].swapped_in(trainer._named), torch.no_grad():
            logits = trainer._model(ids, gpt_model.position_ids(ids), None)[:, -1].float()
        dist = torch.distributions.Categorical(logits=logits)
        token = dist.sample()
        logprobs.append(dist.log_prob(token))
        ids = torch.cat([ids, token[:, None]], dim=1)
    response = ids[:, len(prompts[0]) :]
    return response.tolist(), torch.stack(logprobs, dim=1).tolist()


def train_run(staleness: int, name: str, iterations: int, seed: int) -> dict[str, Any]:
    """One configuration, in a fresh process: the reward and drift metrics per iteration."""
    import torch

    from actors.demo.task import shaped_copy_reward
    from actors.model_config import ModelConfig
    from actors.processes import free_port
    from actors.rollout.advantages import compute_advantages
    from actors.rollout.prompt_plan import PromptPlan
    from actors.tokenizer import BYTE_TOKENIZER
    from actors.trainer import OptimizerConfig, Trainer, TrainerConfig
    from actors.trainer.reference import ReferenceWeights

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = ModelConfig(hidden_size=64, num_layers=2, num_attention_heads=4, num_key_value_heads=4,
                        ffn_hidden_size=128, max_position_embeddings=64, seed=1234)  # the async demo's  # fmt: skip
    config = TrainerConfig(model=model, optimizer=OptimizerConfig(lr=0.02), objective=OBJECTIVES[name], seed=seed)
    trainer = Trainer(rank=0, world_size=1, master_addr="127.0.0.1", master_port=free_port(), config=config)
    snapshots = [ReferenceWeights(trainer._named)]  # version v: the weights after v updates
    rows = []
    try:
        for iteration in range(1, iterations + 1):
            current = iteration - 1
            oldest = max(0, current - staleness)
            # partial rollout: the first tokens from the oldest version, later ones from newer, the last current
            versions = [oldest + (current - oldest) * j // max(TARGET_LEN - 1, 1) for j in range(TARGET_LEN)]
            batch = PromptPlan(PROMPTS, target_len=TARGET_LEN, data_seed=seed).batch(iteration - 1)
            prompt_ids = [BYTE_TOKENIZER.encode(p["text"]) for p in batch]
            responses, logprobs = _sample(trainer, snapshots, prompt_ids, versions)
            rewards = [shaped_copy_reward(prompt_ids[i // SAMPLES], r, batch[i // SAMPLES]["label"])
                       for i, r in enumerate(responses)]  # fmt: skip
            tokens = [prompt_ids[i // SAMPLES] + r for i, r in enumerate(responses)]
            mask = [[0] * len(prompt_ids[i // SAMPLES]) + [1] * len(r) for i, r in enumerate(responses)]
            lags = [[current - v for v in versions]] * len(responses)
            metrics = trainer.train_step(tokens, mask, compute_advantages(rewards, SAMPLES),
                                         rollout_logprobs=logprobs, version_lags=lags)  # fmt: skip
            snapshots.append(ReferenceWeights(trainer._named))
            clip = metrics.get("tis_clipfrac", metrics.get("pg_clipfrac", 0.0))
            rows.append({"reward": sum(rewards) / len(rewards), "clipfrac": clip,
                         **{k: metrics[k] for k in METRICS if k in metrics}})  # fmt: skip
    finally:
        trainer.close()
    return {"staleness": staleness, "objective": name, "rows": rows}


def _runs_for(args: tuple[int, int, int]) -> list[dict[str, Any]]:
    """Every objective at one staleness, in this (spawned) process: one trainer after another."""
    staleness, iterations, seed = args
    runs = []
    for name in OBJECTIVES:
        started = time.monotonic()
        runs.append(train_run(staleness, name, iterations, seed))
        rewards = [r["reward"] for r in runs[-1]["rows"]]
        print(f"  staleness {staleness} {name:<12} reward {rewards[0]:.3f} -> {rewards[-1]:.3f} "
              f"({time.monotonic() - started:.0f}s)", file=sys.stderr, flush=True)  # fmt: skip
    return runs


def summarise(run: dict[str, Any]) -> dict[str, Any]:
    rows = run["rows"]
    tail = rows[-5:]
    out = {"staleness": run["staleness"], "objective": run["objective"],
           "reward_first5": statistics.mean(r["reward"] for r in rows[:5]),
           "reward_last5": statistics.mean(r["reward"] for r in tail),
           "samples_trained": len(rows) * PROMPTS * SAMPLES}  # fmt: skip
    for key in METRICS:
        out[key] = statistics.mean(r.get(key, 0.0) for r in rows)
    return out


def offpolicy_table(staleness: list[int], iterations: int, seed: int, jobs: int) -> list[dict[str, Any]]:
    context = multiprocessing.get_context("spawn")
    with context.Pool(min(jobs, len(staleness))) as pool:
        per_staleness = pool.map(_runs_for, [(s, iterations, seed) for s in staleness])
    return [summarise(run) for runs in per_staleness for run in runs]


ROW = re.compile(r"^\s+(\d+)/\d+\s+([0-9.]+)\s")


def launch(kind: str, iterations: int, work: Path) -> dict[str, Any]:
    """One demo launch: per-iteration reward from its console rows, and its RESULT figures."""
    source = ROOT / ("hosts.example.toml" if kind == "sync" else "examples/async-demo.toml")
    stdout, figures = launch_demo(source, kind, iterations, work)
    rewards = [float(m.group(2)) for m in map(ROW.match, stdout.splitlines()) if m]
    return {"rewards": rewards, "wall_s": figures["wall_s"], "result": figures}


def time_to(rewards: list[float], wall_s: float, target: float, window: int = 3) -> float | None:
    """Wall time (iterations spread evenly over wall_s) until the moving mean of ``window`` rewards reaches target."""
    for index in range(window - 1, len(rewards)):
        if statistics.mean(rewards[index - window + 1 : index + 1]) >= target:
            return wall_s * (index + 1) / len(rewards)
    return None


def throughput(iterations: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="offpolicy-bench-") as tmp:
        runs = {kind: launch(kind, iterations, Path(tmp)) for kind in ("sync", "async")}
    finals = {k: statistics.mean(r["rewards"][-3:]) for k, r in runs.items()}
    target = min(finals.values())
    times = {k: time_to(r["rewards"], r["wall_s"], target) for k, r in runs.items()}
    speedup = times["sync"] / times["async"] if times["sync"] and times["async"] else None
    return {"iterations": iterations, "target_reward": target, "final_reward": finals, "time_to_target_s": times,
            "wall_s": {k: r["wall_s"] for k, r in runs.items()}, "speedup_at_equal_reward": speedup}  # fmt: skip


def print_table(table: list[dict[str, Any]], iterations: int) -> None:
    print(f"copy task, {PROMPTS}x{SAMPLES} samples per iteration, {iterations} iterations; partial rollouts "
          "(token versions spread from the oldest to the trainer's); means over the run")  # fmt: skip
    header = f"{'stale':>5} {'objective':<12} {'reward 1-5':>10} {'last 5':>8} {'|dlogp|':>8} {'k3 KL':>8} "
    print(header + f"{'ESS':>6} {'clip':>6}")
    for row in table:
        print(f"{row['staleness']:>5} {row['objective']:<12} {row['reward_first5']:10.3f} {row['reward_last5']:8.3f} "
              f"{row['train_rollout_logprob_abs_diff']:8.4f} {row['mismatch_k3_kl']:8.4f} {row['ess_ratio']:6.3f} "
              f"{row['clipfrac']:6.3f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=24)
    parser.add_argument("--staleness", type=int, nargs="*", default=[0, 2, 4], help="none: skip part 1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=3, help="configurations run at once (one process each)")
    parser.add_argument("--throughput", action="store_true", help="also launch the sync and the async demo")
    parser.add_argument("--throughput-iterations", type=int, default=12)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    summary: dict[str, Any] = {}
    if args.staleness:
        summary["offpolicy"] = table = offpolicy_table(args.staleness, args.iterations, args.seed, args.jobs)
        print_table(table, args.iterations)
    if args.throughput:
        summary["throughput"] = figures = throughput(args.throughput_iterations)
        print(f"sync vs async demo, {args.throughput_iterations} iterations each: final reward "
              f"{figures['final_reward']}, time to reward {figures['target_reward']:.3f}: "
              f"{figures['time_to_target_s']}, "
              f"speedup {figures['speedup_at_equal_reward']}")  # fmt: skip
    if args.json:
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
