"""GPU check (not part of CI): the trainer's CUDA path, Megatron's DDP and DistributedOptimizer, on NCCL.

Run on a host with CUDA GPUs and the train extra installed (``pip install -e '.[train]'``)::

    python scripts/gpu_megatron_check.py [--tp 1|2] [--steps 5]

With 2+ GPUs it runs 2 ranks (DP=2, or TP=2 x DP=1 with ``--tp 2``), with 1 GPU a single rank, one rank
process per GPU (``CUDA_VISIBLE_DEVICES``, as the launcher places trainer ranks). A small qwen3-shaped model
(GQA, q/k-norm, whose TP gradient sum ``finalize_model_grads`` does) trains a few steps on fixed data, with:

1. ``megatron_distributed``: Megatron DDP + DistributedOptimizer (the CUDA default), NCCL;
2. ``megatron``: Megatron DDP + its plain FP32 AdamW (``optimizer.use_distributed_optimizer=false``), NCCL;
3. ``torch_adamw``: the CPU path (torch AdamW, our gradient all-reduce), gloo, same ranks and data.

It checks that the loss decreases, that ranks agree on the parameters (sha256 of the gathered HF weights on
every rank, of the local shards on DP replicas), that each CUDA path matches the CPU path (per-step loss and
grad norm within a relative 1e-3, final weights within 2 x lr: AdamW moves a weight whose gradient is
nearly zero by up to lr per step in either direction, so float32 rounding differences between GPU and CPU
kernels can show up to that size there), that a checkpoint saves and loads (weights, optimizer state, step,
and the next step's loss are as before) and that ``save_hf_checkpoint`` writes the exported weights. It
prints one line per check and PASS, or FAIL and the first failure (exit 1); without CUDA it exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

LR = 1e-3
LOSS_RTOL = 1e-3
KINDS = ("megatron_distributed", "megatron", "torch_adamw")


def model_config() -> Any:
    from actors.model_config import ModelConfig

    return ModelConfig(
        architecture="qwen3", vocab_size=256, hidden_size=128, num_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, ffn_hidden_size=256, max_position_embeddings=64,
    )  # fmt: skip


def trainer_config(kind: str, tp: int) -> Any:
    from actors.trainer import OptimizerConfig, ParallelConfig, TrainerConfig

    optimizer = OptimizerConfig(
        lr=LR, weight_decay=0.01, grad_clip=1.0, use_distributed_optimizer={"megatron": False}.get(kind)
    )
    return TrainerConfig(
        model=model_config(), parallel=ParallelConfig(tensor_model_parallel_size=tp), optimizer=optimizer,
        backend="gloo" if kind == "torch_adamw" else "nccl", collective_timeout_s=180.0,
    )  # fmt: skip


def batch(step: int, dp_rank: int, dp_size: int) -> tuple[list[list[int]], list[float]]:
    """8 fixed sequences per step (a few repeating patterns, so the loss can fall), this DP rank's share."""
    from actors.trainer import dp_shard_bounds

    rows = [[(3 * row + 7 * step + t * (row % 3 + 1)) % 256 for t in range(24 + row)] for row in range(8)]
    start, stop = dp_shard_bounds(len(rows), dp_rank=dp_rank, dp_size=dp_size)
    return rows[start:stop], [1.0] * (stop - start)


def train(trainer: Any, step: int) -> dict[str, float]:
    layout = trainer.layout
    tokens, advantages = batch(step % 2, layout.dp_rank, layout.dp_size)
    return trainer.train_step(tokens, None, advantages)


def check_checkpoint(trainer: Any, out: Path, steps: int) -> dict[str, Any]:
    """Save, step, load: weights, optimizer state and step come back, and the same step gives the same loss."""
    directory = trainer.save_checkpoint(str(out / "checkpoint"))
    saved = (trainer.weights_digest(), trainer.optimizer_digest(), trainer.step)
    first = train(trainer, steps)["loss"]
    assert trainer.weights_digest() != saved[0], "a step after the save changed no weight"
    loaded_step = trainer.load_checkpoint(directory)
    restored = (trainer.weights_digest(), trainer.optimizer_digest(), loaded_step)
    assert restored == saved, f"after load_checkpoint {restored} != saved {saved}"
    again = train(trainer, steps)["loss"]
    assert abs(again - first) <= 1e-6 * max(1.0, abs(first)), f"loss after reload {again} != {first}"
    return {"checkpoint": "ok"}


def check_hf_save(trainer: Any, out: Path) -> None:
    import torch
    from safetensors.torch import load_file

    exported = dict(trainer.export_hf_weights())
    path = Path(trainer.save_hf_checkpoint(str(out / "hf")))
    if trainer.layout.rank == 0:
        saved = {name: t for file in sorted(path.glob("*.safetensors")) for name, t in load_file(str(file)).items()}
        assert (path / "config.json").is_file(), "save_hf_checkpoint wrote no config.json"
        for name, tensor in saved.items():
            assert torch.equal(tensor, exported[name]), f"{name} in the HF checkpoint differs from the export"


def worker(args: argparse.Namespace) -> int:
    """One rank: train, check, write rank{R}.json (and rank 0 the final weights) under ``--out``."""
    import torch

    from actors.trainer import Trainer

    torch.backends.cuda.matmul.allow_tf32 = False  # float32 matmuls on both devices
    out = Path(args.out)
    config = trainer_config(args.worker, args.tp)
    result: dict[str, Any] = {}
    with Trainer(
        rank=args.rank, world_size=args.world_size, master_addr="127.0.0.1", master_port=args.port, config=config
    ) as trainer:
        result["optimizer_kind"] = trainer.optimizer_kind
        result["tp_rank"] = trainer.layout.tp_rank
        metrics = [train(trainer, step) for step in range(args.steps)]
        result["losses"] = [m["loss"] for m in metrics]
        result["grad_norms"] = [m["grad_norm"] for m in metrics]
        result["local_digest"] = trainer.weights_digest()
        result["gathered_digest"] = trainer.weights_digest(gathered=True)
        if args.rank == 0:
            torch.save(dict(trainer.export_hf_weights()), out / "weights.pt")
        else:
            trainer.export_hf_weights()  # collective over TP
        check_hf_save(trainer, out)
        result.update(check_checkpoint(trainer, out, args.steps))
    (out / f"rank{args.rank}.json").write_text(json.dumps(result))
    return 0


def free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_ranks(kind: str, world_size: int, tp: int, steps: int, out: Path, timeout_s: float) -> list[dict[str, Any]]:
    """Start ``world_size`` rank processes of ``kind`` and wait for them (killed by pid at the deadline)."""
    out.mkdir(parents=True)
    port = free_port()
    procs = []
    for rank in range(world_size):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "" if kind == "torch_adamw" else str(rank)}
        argv = [sys.executable, __file__, "--worker", kind, "--rank", str(rank), "--world-size", str(world_size)]
        argv += ["--port", str(port), "--tp", str(tp), "--steps", str(steps), "--out", str(out)]
        with open(out / f"log{rank}.txt", "wb") as log:
            procs.append(subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=log))
    deadline = time.monotonic() + timeout_s
    try:
        for rank, proc in enumerate(procs):
            code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            if code != 0:
                tail = (out / f"log{rank}.txt").read_text(errors="replace")[-3000:]
                raise AssertionError(f"{kind} rank {rank} exited with {code}:\n{tail}")
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{kind} ranks still running after {timeout_s}s (logs in {out})") from exc
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(world_size)]


def check_run(kind: str, results: list[dict[str, Any]]) -> None:
    """The optimizer path, the loss falling, and ranks agreeing on the parameters."""
    assert all(r["optimizer_kind"] == kind for r in results), [r["optimizer_kind"] for r in results]
    losses = results[0]["losses"]
    assert losses[-1] < losses[0], f"{kind}: loss did not decrease: {losses}"
    assert len({r["gathered_digest"] for r in results}) == 1, f"{kind}: ranks disagree on the weights"
    for tp_rank in {r["tp_rank"] for r in results}:
        replicas = {r["local_digest"] for r in results if r["tp_rank"] == tp_rank}
        assert len(replicas) == 1, f"{kind}: DP replicas of TP rank {tp_rank} disagree on their shards"


def compare(kind: str, results: list[dict[str, Any]], reference: list[dict[str, Any]], root: Path) -> str:
    """``kind`` against the CPU path: per-step loss and grad norm, then the final weights."""
    import torch

    for field in ("losses", "grad_norms"):
        for step, (got, want) in enumerate(zip(results[0][field], reference[0][field], strict=True)):
            assert abs(got - want) <= LOSS_RTOL * max(abs(want), 1e-6), f"{kind} step {step} {field}: {got} vs {want}"
    ours = torch.load(root / kind / "weights.pt", weights_only=True)
    cpu = torch.load(root / "torch_adamw" / "weights.pt", weights_only=True)
    worst = max(float((ours[name].float() - cpu[name].float()).abs().max()) for name in cpu)
    assert worst <= 2 * LR, f"{kind}: weights differ from the CPU path by up to {worst} (> {2 * LR})"
    return f"max |weight diff| {worst:.2e}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tp", type=int, choices=[1, 2], default=1, help="tensor parallel size (2 needs 2 GPUs)")
    parser.add_argument("--steps", type=int, default=5, help="training steps per run (at least 2)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds each run may take")
    parser.add_argument("--keep", action="store_true", help="keep the run directory (logs, checkpoints)")
    parser.add_argument("--worker", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--world-size", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.steps < 2:
        parser.error("--steps must be at least 2")
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        print("no CUDA device here: this check needs 1+ GPUs (2 for DP=2 or --tp 2)", file=sys.stderr)
        return 2
    if args.tp > gpus:
        parser.error(f"--tp {args.tp} needs {args.tp} GPUs, this host has {gpus}")
    world_size = min(gpus, 2)
    print(f"{gpus} GPU(s): {world_size} rank(s), TP={args.tp} x DP={world_size // args.tp}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="gpu-megatron-check-"))
    try:
        runs: dict[str, list[dict[str, Any]]] = {}
        for kind in KINDS:
            runs[kind] = run_ranks(kind, world_size, args.tp, args.steps, root / kind, args.timeout)
            check_run(kind, runs[kind])
            print(f"ok   {kind}: losses {[round(x, 4) for x in runs[kind][0]['losses']]}, ranks agree, "
                  "checkpoint and HF save round trip", flush=True)  # fmt: skip
        for kind in KINDS[:2]:
            print(f"ok   {kind} matches torch_adamw ({compare(kind, runs[kind], runs['torch_adamw'], root)})")
    except AssertionError as exc:
        print(f"FAIL {exc}\n(run directory: {root})")
        return 1
    if not args.keep:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
