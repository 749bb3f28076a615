"""A trainer for tests/actors/test_hf_engine.py, run as a subprocess (a script, not a test module).

    python hf_push_helper.py --model-path DIR --port P --group-port G --tensor-url URL --group-url URL --out DIR

One rank (TP=1) of TrainerConfig(model_path=DIR): one train step on two tokenized prompts, then the weights go
to the engine at ``--tensor-url`` over ``/update_weights_from_tensor`` (several buckets, inside
``/begin_weight_update`` .. ``/end_weight_update``) and to the engine at ``--group-url`` over a gloo group
(``/update_weights_from_distributed``), both as version ``v-trained``; finally ``save_hf_checkpoint`` writes
``OUT/trained``. Writes ``OUT/result.json`` with the engines' replies.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from actors.hf import HfTokenizer
from actors.trainer import OptimizerConfig, Trainer, TrainerConfig

PROMPTS = ["What is two plus two? Two plus two is four.", "Hello world! Hello trainer."]
BUCKET_BYTES = 16_384  # several requests / broadcasts per push


def main() -> int:
    parser = argparse.ArgumentParser()
    for flag in ("--model-path", "--tensor-url", "--group-url", "--out"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--group-port", type=int, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="trainer %(asctime)s %(name)s: %(message)s")
    rows = [HfTokenizer(args.model_path).encode(text) for text in PROMPTS]
    config = TrainerConfig(
        model_path=args.model_path, optimizer=OptimizerConfig(lr=1e-2), collective_timeout_s=120.0, cpu_threads=1
    )
    with Trainer(rank=0, world_size=1, master_addr="127.0.0.1", master_port=args.port, config=config) as trainer:
        loss = trainer.train_step(rows, None, [1.0, -0.5])["loss"]
        by_tensor = trainer.push_weights_to_engines(
            [args.tensor_url], "v-trained", bucket_bytes=BUCKET_BYTES, timeout_s=30.0
        )
        by_group = trainer.push_weights_over_group(
            [args.group_url], "v-trained", master_address="127.0.0.1", master_port=args.group_port,
            bucket_bytes=BUCKET_BYTES, timeout_s=30.0,
        )  # fmt: skip
        saved = trainer.save_hf_checkpoint(str(Path(args.out) / "trained"))
    result = {"loss": loss, "by_tensor": by_tensor, "by_group": by_group, "saved": saved}
    (Path(args.out) / "result.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
