"""What the metrics cost on the call path: the same actor with /metrics on and off, measured in alternation.

Run ``python bench/metrics_bench.py`` (``--json`` adds one JSON object as the last line). Rounds alternate
between the two actors so that a busy machine slows both alike; besides calls/s it reports the actor process's
CPU time per call, which is steadier than throughput on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import pipelined

from runtime import spawn


def run(rounds: int, calls: int) -> dict[str, float]:
    actors = {"on": spawn("bench_actors:Echo"), "off": spawn("bench_actors:Echo", metrics_port=None)}
    try:
        processes = {label: psutil.Process(actor.pid) for label, actor in actors.items()}
        for actor in actors.values():
            pipelined(actor.noop, 2000, 500)  # warm up
        rate: dict[str, list[float]] = {"on": [], "off": []}
        cpu_us: dict[str, list[float]] = {"on": [], "off": []}
        for index in range(rounds):
            for label in ("on", "off") if index % 2 == 0 else ("off", "on"):
                before = sum(processes[label].cpu_times()[:2])
                rate[label].append(pipelined(actors[label].noop, calls, 1000))
                cpu_us[label].append((sum(processes[label].cpu_times()[:2]) - before) / calls * 1e6)
    finally:
        for actor in actors.values():
            actor.kill()
    results = {}
    for label in ("on", "off"):
        results[f"metrics_{label}_calls_per_s"] = statistics.median(rate[label])
        results[f"metrics_{label}_actor_cpu_us_per_call"] = statistics.median(cpu_us[label])
    results["calls_per_s_ratio_on_over_off"] = results["metrics_on_calls_per_s"] / results["metrics_off_calls_per_s"]
    results["cpu_ratio_on_over_off"] = (
        results["metrics_on_actor_cpu_us_per_call"] / results["metrics_off_actor_cpu_us_per_call"]
    )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=10000, help="pipelined calls per round and actor")
    args = parser.parse_args()
    results = run(args.rounds, args.calls)
    for label in ("on", "off"):
        print(
            f"metrics {label:3s}: {results[f'metrics_{label}_calls_per_s']:7.0f} calls/s (median), actor CPU "
            f"{results[f'metrics_{label}_actor_cpu_us_per_call']:.1f} us/call"
        )
    print(
        f"on/off: calls/s x{results['calls_per_s_ratio_on_over_off']:.3f}, "
        f"actor CPU per call x{results['cpu_ratio_on_over_off']:.3f}"
    )
    if args.json:
        print(json.dumps({key: round(value, 3) for key, value in results.items()}))


if __name__ == "__main__":
    main()
