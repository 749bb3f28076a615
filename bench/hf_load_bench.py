"""Loading a Hugging Face checkpoint into the Megatron trainer on CPU: TP=2, gloo, 127.0.0.1.

    python bench/hf_load_bench.py [--model-dir DIR] [--json]

The checkpoint has Qwen2.5-0.5B's config values (hidden 896, 24 layers, 14 heads / 2 KV heads, ffn 4864,
vocab 151936, tied embeddings, q/k/v biases, bfloat16) with random weights, made locally with transformers
(never downloaded) unless ``--model-dir`` names one already made. Each rank reports the time from entering the
Trainer constructor to a loaded model (rendezvous, GPTModel build without random init, reading its slices)
and its peak RSS (VmHWM, which includes the pages of the mmap-ed safetensors the rank touched).
Ranks run as subprocesses of this script (``--worker``) and are killed by pid if they miss the deadline.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench_common import free_port, run_ranks

REPO = Path(__file__).resolve().parents[1]
DEADLINE_S = 900.0
QWEN25_05B = {
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "use_sliding_window": False,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
}


def make_checkpoint(directory: Path) -> float:
    """Write the random Qwen2.5-0.5B-shaped checkpoint (bfloat16); returns the seconds it took."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    started = time.perf_counter()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(Qwen2Config(**QWEN25_05B), dtype=torch.bfloat16)
    model.save_pretrained(str(directory))
    return time.perf_counter() - started


def peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM). Not ru_maxrss: Linux carries that over exec from the parent."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError("VmHWM not in /proc/self/status (Linux only)")


def worker(args: argparse.Namespace) -> None:
    """One rank: import, then construct the trainer from the checkpoint; write time and RSS to ``args.out``."""
    from actors.trainer import ParallelConfig, Trainer, TrainerConfig

    config = TrainerConfig(
        model_path=args.model_dir, parallel=ParallelConfig(tensor_model_parallel_size=2), collective_timeout_s=600.0
    )
    rss_before = peak_rss_mib()
    started = time.perf_counter()
    trainer = Trainer(rank=args.rank, world_size=2, master_addr="127.0.0.1", master_port=args.port, config=config)
    load_s = time.perf_counter() - started
    local = sum(p.numel() for p in trainer._model.parameters())
    trainer.close()
    result = {"load_s": load_s, "rss_before_mib": rss_before, "peak_rss_mib": peak_rss_mib(), "local_params": local}
    Path(args.out).write_text(json.dumps(result))


def rank_results(model_dir: Path, workdir: Path) -> list[dict[str, float]]:
    port = free_port()
    outputs = [workdir / f"rank{rank}.json" for rank in range(2)]
    commands = [
        [sys.executable, __file__, "--worker", "--rank", str(rank), "--port", str(port), "--model-dir", str(model_dir),
         "--out", str(outputs[rank])]
        for rank in range(2)
    ]  # fmt: skip
    return run_ranks(commands, outputs, cwd=REPO, deadline_s=DEADLINE_S)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default="", help="an existing checkpoint (default: make one in a temp dir)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return 0
    with tempfile.TemporaryDirectory(prefix="hf_load_bench-") as tmp:
        model_dir = Path(args.model_dir) if args.model_dir else Path(tmp) / "qwen2.5-0.5b-random"
        made_s = None if args.model_dir else make_checkpoint(model_dir)
        size = sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))
        ranks = rank_results(model_dir, Path(tmp))
    if made_s is not None:
        print(f"made the random checkpoint in {made_s:.1f} s ({size / 2**20:.0f} MiB of safetensors)")
    for rank, result in enumerate(ranks):
        print(
            f"rank {rank}/2 (TP=2): load {result['load_s']:.2f} s, peak RSS {result['peak_rss_mib']:.0f} MiB "
            f"(after imports {result['rss_before_mib']:.0f} MiB), {result['local_params'] / 1e6:.1f} M local parameters"
        )
    if args.json:
        print(json.dumps({"checkpoint_bytes": size, "made_s": made_s, "ranks": ranks}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
