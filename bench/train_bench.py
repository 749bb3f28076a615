"""Train-step time of the Megatron trainer on CPU: 1 rank, then 2 data-parallel ranks (gloo, 127.0.0.1).

    python bench/train_bench.py [--steps 10] [--warmup 3] [--batch 8] [--seq 128] [--threads 1] [--json]

Each rank trains on its own batch of ``--batch`` sequences of ``--seq`` tokens; the step time is rank 0's
``train_step`` wall time (forward, backward, gradient all-reduce, AdamW). ``--json`` prints one JSON
object as the last line. Ranks run as subprocesses of this script (``--worker``) and are killed by pid if
they miss the deadline.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from bench_common import free_port, run_ranks

REPO = Path(__file__).resolve().parents[1]
DEADLINE_S = 300.0


def model_kwargs() -> dict[str, int]:
    return {
        "vocab_size": 260,
        "hidden_size": 128,
        "num_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "ffn_hidden_size": 384,
        "max_position_embeddings": 512,
    }


def worker(args: argparse.Namespace) -> None:
    """One rank: warm up, time ``args.steps`` train steps, write the times to ``args.out``."""
    import torch

    from actors.model_config import ModelConfig
    from actors.trainer import ParallelConfig, Trainer, TrainerConfig

    config = TrainerConfig(
        model=ModelConfig(**model_kwargs()),
        parallel=ParallelConfig(tensor_model_parallel_size=args.tp),
        cpu_threads=args.threads,
        collective_timeout_s=60.0,
    )
    trainer = Trainer(
        rank=args.rank, world_size=args.world_size, master_addr="127.0.0.1", master_port=args.port, config=config
    )
    try:
        generator = torch.Generator().manual_seed(args.rank)
        tokens = torch.randint(0, 256, (args.batch, args.seq), generator=generator)
        advantages = torch.randn(args.batch, generator=generator)
        times = []
        for step in range(args.warmup + args.steps):
            metrics = trainer.train_step(tokens, None, advantages)
            if step >= args.warmup:
                times.append(metrics["step_time_s"])
        Path(args.out).write_text(json.dumps({"times": times, "tokens": metrics["tokens"]}))
    finally:
        trainer.close()


def run_case(world_size: int, tp: int, args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    """Start ``world_size`` ranks, wait for them (with a deadline), summarize rank 0's step times."""
    port = free_port()
    outputs = [workdir / f"w{world_size}-tp{tp}-rank{rank}.json" for rank in range(world_size)]
    commands = []
    for rank in range(world_size):
        cmd = [sys.executable, __file__, "--worker", "--rank", str(rank), "--world-size", str(world_size)]
        cmd += ["--port", str(port), "--tp", str(tp), "--out", str(outputs[rank])]
        cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch)]
        cmd += ["--seq", str(args.seq), "--threads", str(args.threads)]
        commands.append(cmd)
    result = run_ranks(commands, outputs, cwd=REPO, deadline_s=DEADLINE_S)[0]
    times = result["times"]
    mean = statistics.fmean(times)
    return {
        "world_size": world_size,
        "tp": tp,
        "dp": world_size // tp,
        "step_mean_s": mean,
        "step_p50_s": statistics.median(times),
        "tokens_per_step": result["tokens"],
        "tokens_per_s": result["tokens"] / mean,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8, help="sequences per rank")
    parser.add_argument("--seq", type=int, default=128, help="tokens per sequence")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--world-size", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--tp", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return 0
    cases = []
    with tempfile.TemporaryDirectory(prefix="train_bench-") as tmp:
        for world_size in (1, 2):
            case = run_case(world_size, 1, args, Path(tmp))
            cases.append(case)
            print(
                f"{world_size} rank(s), dp={case['dp']}: step mean {case['step_mean_s'] * 1e3:.1f} ms, "
                f"p50 {case['step_p50_s'] * 1e3:.1f} ms, {case['tokens_per_s']:.0f} trained tokens/s"
            )
    if args.json:
        config = {k: getattr(args, k) for k in ("steps", "warmup", "batch", "seq", "threads")}
        print(json.dumps({"bench": "train_step", "model": model_kwargs(), "config": config, "cases": cases}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
