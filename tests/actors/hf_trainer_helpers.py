"""One trainer rank for tests/actors/test_hf_trainer.py, run as a subprocess (a script, not a test module).

    python hf_trainer_helpers.py load_save --rank R --world-size W --port P --tp T --out DIR \
        --models DIR --kinds llama,qwen2 [--ports P1,P2]

For each checkpoint kind in turn (one Trainer after another in this process, each on its own port): log-probs
of the probe rows before any step, ``save_hf_checkpoint`` to ``DIR/{kind}-initial``, one train step, log-probs
again and ``save_hf_checkpoint`` to ``DIR/{kind}-trained``. Every safetensors read is recorded (name, dim,
bounds), so the test can check that each rank read only its slices. Writes ``DIR/rank{R}.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import traceback
from pathlib import Path

from actors.hf import HfTokenizer
from actors.hf.reader import CheckpointReader
from actors.trainer import OptimizerConfig, ParallelConfig, Trainer, TrainerConfig

PROMPTS = ["What is two plus two? Two plus two is four.", "Hello world! Hello trainer."]
READS: list[dict[str, object]] = []


def record_reads() -> None:
    """Wrap CheckpointReader.read so every read (a whole tensor or a slice) is noted in READS."""
    original = CheckpointReader.read

    def read(self, name, *, dim=None, start=0, stop=None):  # type: ignore[no-untyped-def]
        tensor = original(self, name, dim=dim, start=start, stop=stop)
        READS.append({"name": name, "dim": dim, "full": list(self.shape(name)), "got": list(tensor.shape)})
        return tensor

    CheckpointReader.read = read  # type: ignore[method-assign]


def run_kind(kind: str, port: int, args: argparse.Namespace) -> dict[str, object]:
    model_path = Path(args.models) / kind
    rows = [HfTokenizer(model_path).encode(text) for text in PROMPTS]
    config = TrainerConfig(
        model_path=str(model_path),
        parallel=ParallelConfig(tensor_model_parallel_size=args.tp),
        optimizer=OptimizerConfig(lr=1e-2),
        collective_timeout_s=args.timeout,
        cpu_threads=1,
    )
    READS.clear()
    trainer = Trainer(rank=args.rank, world_size=args.world_size, master_addr="127.0.0.1", master_port=port,
                      config=config)  # fmt: skip
    try:
        reads = list(READS)
        initial = trainer.forward_logprobs(rows)
        saved_initial = trainer.save_hf_checkpoint(str(Path(args.out) / f"{kind}-initial"), max_shard_bytes=20_000)
        metrics = trainer.train_step(rows, None, [1.0, -0.5])
        trained = trainer.forward_logprobs(rows)
        saved_trained = trainer.save_hf_checkpoint(str(Path(args.out) / f"{kind}-trained"))
    finally:
        trainer.close()
    return {
        "rows": rows,
        "initial": [t.tolist() for t in initial],
        "trained": [t.tolist() for t in trained],
        "saved_initial": saved_initial,
        "saved_trained": saved_trained,
        "loss": metrics["loss"],
        "reads": reads,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["load_save"])
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ports", default="", help="one port per kind after the first (which uses --port)")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--kinds", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=f"rank{args.rank} %(asctime)s %(name)s: %(message)s")
    record_reads()
    kinds = args.kinds.split(",")
    ports = [args.port] + [int(p) for p in args.ports.split(",") if p]
    out_file = Path(args.out) / f"rank{args.rank}.json"
    try:
        result = {kind: run_kind(kind, port, args) for kind, port in zip(kinds, ports, strict=True)}
    except BaseException:
        out_file.write_text(json.dumps({"exception": traceback.format_exc()}))
        raise
    out_file.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
