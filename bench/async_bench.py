"""Async vs synchronous RL loop at equal iterations: generation throughput and how busy the engines were.

Runs ``miles-launch hosts.example.toml`` (synchronous) and ``miles-launch examples/async-demo.toml`` (once per
``--in-flight`` mode) with the same iteration count, alternating ``--rounds`` times, and reads each job's
``RESULT {json}`` line. Prints a table and, with ``--json``, one JSON object as the last line.

    python bench/async_bench.py --iterations 12 --rounds 2 [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from bench_common import launch_demo

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"sync": ROOT / "hosts.example.toml", "async": ROOT / "examples" / "async-demo.toml"}
FIELDS = ("wall_s", "tokens_per_s", "engine_busy_fraction", "request_busy_fraction", "samples_retried")


def run(kind: str, iterations: int, in_flight: str, work: Path) -> dict:
    return launch_demo(CONFIGS[kind], kind, iterations, work, in_flight=f'"{in_flight}"')[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    modes = ["finish", "partial", "restart"]
    parser.add_argument("--in-flight", nargs="+", default=modes[:2], choices=modes)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="async-bench-") as tmp:
        for _ in range(args.rounds):
            runs.setdefault("sync", []).append(run("sync", args.iterations, "partial", Path(tmp)))
            for mode in args.in_flight:
                runs.setdefault(f"async-{mode}", []).append(run("async", args.iterations, mode, Path(tmp)))
    summary = {name: {f: statistics.median(r[f] for r in results) for f in FIELDS} for name, results in runs.items()}
    print(f"{args.iterations} iterations, medians of {args.rounds} round(s)")
    print(f"{'loop':<16}" + "".join(f"{f:>22}" for f in FIELDS))
    for name, figures in summary.items():
        print(f"{name:<16}" + "".join(f"{figures[f]:>22.3f}" for f in FIELDS))
    if args.json:
        print(json.dumps({"iterations": args.iterations, "rounds": args.rounds, "summary": summary, "runs": runs}))


if __name__ == "__main__":
    main()
