"""One trainer rank for tests/actors/test_trainer.py, run as a subprocess (a script, not a test module).

    python trainer_helpers.py SCENARIO --rank R --world-size W --port P --tp T --out DIR

Each rank writes ``DIR/rank{R}.json`` (numbers, digests) and rank 0 may write ``DIR/export.pt`` (tensors).
Scenarios:

- ``train``: a few policy-gradient steps on fixed sequences with positive advantage (each DP rank its own
  sequence), digests after every step, a checkpoint round trip (save after step 2, redo step 3 after
  loading: same weights and optimizer state), an HF export with logits for the test's reference model and
  ``save_hf_checkpoint`` to ``DIR/hf`` (the built-in model as an HF directory),
  then (with ``--engine-url``) a weight push to a fake engine and one to a failing engine; health() is
  polled from a thread during the first step.
- ``peer_lost``: one step, then rank 1 stops answering (``DIR/ready1`` written, then it sleeps until the
  test kills it or forever); rank 0 starts the next step and must fail within the collective timeout.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
import traceback
from pathlib import Path

import torch

from actors.model_config import ModelConfig
from actors.trainer import (
    OptimizerConfig,
    ParallelConfig,
    Trainer,
    TrainerConfig,
    TrainerFailed,
    WeightPushError,
)

# GQA with two query groups per TP rank at tp=2, so the interleaved QKV layout is really exercised.
TINY_MODEL = ModelConfig(
    vocab_size=64,
    hidden_size=32,
    num_layers=2,
    num_attention_heads=8,
    num_key_value_heads=4,
    ffn_hidden_size=48,
    max_position_embeddings=64,
    seed=7,
)
STEPS = 4
CHECKPOINT_AFTER = 2
PROBE = [[1, 5, 9, 2, 33, 17, 60, 4, 4, 21], [3, 3, 8, 40, 12, 0, 63, 7, 30, 11]]


def target(dp_rank: int) -> list[int]:
    """The sequence DP rank ``dp_rank`` trains towards (distinct per rank, shared by TP peers)."""
    return [(7 * dp_rank + 3 * i + 1) % TINY_MODEL.vocab_size for i in range(12)]


def make_config(args: argparse.Namespace) -> TrainerConfig:
    return TrainerConfig(
        model=TINY_MODEL,
        parallel=ParallelConfig(tensor_model_parallel_size=args.tp),
        optimizer=OptimizerConfig(lr=3e-3, grad_clip=1.0, weight_decay=0.01),
        collective_timeout_s=args.timeout,
        micro_batch_size=args.micro_batch,
        cpu_threads=1,
    )


def train_batch(trainer: Trainer) -> tuple[list[list[int]], list[list[int]], list[float]]:
    tokens = [target(trainer.layout.dp_rank)] * 2
    mask = [[0] * 3 + [1] * (len(row) - 3) for row in tokens]  # the first 3 tokens are the "prompt"
    return tokens, mask, [1.0, 0.5]


def run_train(trainer: Trainer, args: argparse.Namespace) -> dict[str, object]:
    tokens, mask, advantages = train_batch(trainer)
    result: dict[str, object] = {"losses": [], "digests": [], "gathered_digests": [], "tokens": []}
    seen: list[dict[str, object]] = []
    stop = threading.Event()
    watcher = threading.Thread(target=watch_health, args=(trainer, seen, stop), daemon=True)
    watcher.start()
    for step in range(1, STEPS + 1):
        metrics = trainer.train_step(tokens, mask, advantages)
        if step == 1:
            stop.set()
            watcher.join(timeout=5)
            result["health_seen_running"] = any(h["current"] == "train_step" for h in seen)
        result["losses"].append(metrics["loss"])  # type: ignore[union-attr]
        result["tokens"].append(metrics["tokens"])  # type: ignore[union-attr]
        result["digests"].append(trainer.weights_digest())  # type: ignore[union-attr]
        result["gathered_digests"].append(trainer.weights_digest(gathered=True))  # type: ignore[union-attr]
        if step == CHECKPOINT_AFTER:
            result["checkpoint"] = trainer.save_checkpoint(str(Path(args.out) / "ckpt"))
        if step == CHECKPOINT_AFTER + 1:
            result["optimizer_after_step3"] = trainer.optimizer_digest()
    result["grad_norm_last"] = metrics["grad_norm"]
    result["loaded_step"] = trainer.load_checkpoint(str(result["checkpoint"]))
    result["digest_after_load"] = trainer.weights_digest()
    trainer.train_step(tokens, mask, advantages)
    result["digest_after_redo"] = trainer.weights_digest()
    result["optimizer_after_redo"] = trainer.optimizer_digest()
    result["step_after_redo"] = trainer.step
    pairs = trainer.export_hf_weights()
    result["hf_dir"] = trainer.save_hf_checkpoint(str(Path(args.out) / "hf"))
    logits = trainer.forward_logits(torch.tensor(PROBE))
    logprobs = trainer.forward_logprobs(PROBE)
    if trainer.layout.rank == 0:
        saved = {"weights": pairs, "probe": PROBE, "logits": logits, "logprobs": logprobs}
        torch.save(saved | {"model": TINY_MODEL.model_dump()}, Path(args.out) / "export.pt")
    if args.engine_url:
        result["push_replies"] = trainer.push_weights_to_engines([f"{args.engine_url}/good"], "v3")
        try:
            trainer.push_weights_to_engines([f"{args.engine_url}/bad"], "v4")
            result["bad_push"] = "no error"
        except WeightPushError:
            result["bad_push"] = "WeightPushError"
    result["health"] = trainer.health()
    return result


def watch_health(trainer: Trainer, seen: list[dict[str, object]], stop: threading.Event) -> None:
    """Poll health() from another thread, as the actor runtime's control lane does during a step."""
    while not stop.is_set():
        seen.append(trainer.health())
        time.sleep(0.001)


def run_peer_lost(trainer: Trainer, args: argparse.Namespace) -> dict[str, object]:
    tokens, mask, advantages = train_batch(trainer)
    trainer.train_step(tokens, mask, advantages)
    out = Path(args.out)
    if trainer.layout.rank == 1:
        (out / "ready1").write_text("ready")
        time.sleep(3600)  # a hung peer; the test kills it (or not, to test the timeout alone)
    while not (out / "ready1").exists():
        time.sleep(0.01)
    started = time.monotonic()
    result: dict[str, object] = {}
    try:
        trainer.train_step(tokens, mask, advantages)
        result["error"] = None
    except TrainerFailed as exc:
        result["error"] = f"TrainerFailed: {exc}"
    result["elapsed_s"] = time.monotonic() - started
    result["health"] = trainer.health()
    try:
        trainer.weights_digest()
        result["after_failure"] = "no error"
    except TrainerFailed:
        result["after_failure"] = "TrainerFailed"
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["train", "peer_lost"])
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--micro-batch", type=int, default=None)
    parser.add_argument("--engine-url", default="", help="a fake engine to push weights to (train)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=f"rank{args.rank} %(asctime)s %(name)s: %(message)s")
    out_file = Path(args.out) / f"rank{args.rank}.json"
    trainer = Trainer(
        rank=args.rank,
        world_size=args.world_size,
        master_addr="127.0.0.1",
        master_port=args.port,
        config=make_config(args),
    )
    try:
        result = run_train(trainer, args) if args.scenario == "train" else run_peer_lost(trainer, args)
    except BaseException:
        out_file.write_text(json.dumps({"exception": traceback.format_exc()}))
        raise
    finally:
        close_started = time.monotonic()
        trainer.close()
    result["close_s"] = time.monotonic() - close_started
    out_file.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
