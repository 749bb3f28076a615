"""Spawn benchmark: the first spawn of a process (it starts the fork server), single spawns, spawn_many of 8 and 32.

    python bench/spawn_bench.py [--json]                          # forked by this process's fork server
    MILES_SPAWN_FORK_SERVER=0 python bench/spawn_bench.py --json  # every actor a fresh interpreter (Popen)

Each number is wall time from the call to handles whose actors are constructed; actors are killed (and their
exits awaited) outside the timed parts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from runtime import ActorGroup, ActorHandle, spawn, spawn_many


def _killed(handles: list[ActorHandle]) -> None:
    ActorGroup(handles).kill()
    psutil.wait_procs([psutil.Process(h.pid) for h in handles if psutil.pid_exists(h.pid)], timeout=30)
    time.sleep(0.5)  # the next measurement must not share the CPU with processes exiting


def _timed(start: object) -> tuple[float, list[ActorHandle]]:
    began = time.perf_counter()
    handles = start()  # type: ignore[operator]
    return time.perf_counter() - began, handles if isinstance(handles, list) else [handles]


def run(singles: int) -> dict[str, float]:
    results: dict[str, float] = {}
    results["first_spawn_s"], first = _timed(lambda: spawn("bench_actors:Echo"))
    _killed(first)
    times = []
    for _ in range(singles):
        took, handles = _timed(lambda: spawn("bench_actors:Echo"))
        times.append(took)
        _killed(handles)
    results["single_spawn_s"] = statistics.median(times)
    for count in (8, 32):
        took, handles = _timed(lambda count=count: spawn_many("bench_actors:Echo", count))
        results[f"spawn_many_{count}_s"] = took
        _killed(handles)
    return {key: round(value, 4) for key, value in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--singles", type=int, default=10, help="single spawns to take the median of")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    r = run(args.singles)
    lines = [
        f"first spawn (starts the fork server): {r['first_spawn_s']:.3f} s",
        f"single spawn: {r['single_spawn_s']:.3f} s (median of {args.singles})",
        f"spawn_many 8: {r['spawn_many_8_s']:.3f} s",
        f"spawn_many 32: {r['spawn_many_32_s']:.3f} s ({r['spawn_many_32_s'] / 32:.3f} s per actor)",
        *([json.dumps(r)] if args.json else []),
    ]
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
