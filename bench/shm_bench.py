"""Same-host transfer benchmark: 64 and 256 MiB arguments, a 64 MiB return, and this machine's memcpy.

The workloads of the peer benchmarks (../shared/bench-peers, "Common rules"): a ``np.full`` uint8 payload,
touched before timing and reused; ``nbytes(arr)`` for arguments; ``make(size)`` returning an array the actor
allocated once and caches, for returns; GB/s = size / median seconds per call. The memcpy row (numpy copying
between two touched 256 MiB arrays) is the ceiling of any one-copy transfer.

``--repo DIR`` measures the build in DIR (e.g. a ``git worktree`` of an older commit); run alternately with the
current one to compare builds in one sitting. ``--json`` prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

MIB = 1 << 20
ARG_SIZES = {"64mib": (64 * MIB, 10), "256mib": (256 * MIB, 5)}  # label: (bytes, timed calls)
RETURN_SIZE, RETURN_REPEATS = 64 * MIB, 10


class Target:
    """The peer benchmarks' actor: reads an argument's size, returns a cached array."""

    def __init__(self) -> None:
        self.cache: dict[int, np.ndarray] = {}

    def nbytes(self, data: np.ndarray) -> int:
        return int(data.nbytes)

    def make(self, size: int) -> np.ndarray:
        if size not in self.cache:
            self.cache[size] = np.full(size, 7, dtype=np.uint8)
        return self.cache[size]


def median_gbps(size: int, repeats: int, call: Any) -> float:
    call()  # warm-up, never timed
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return size / statistics.median(times) / 1e9


def memcpy_gbps(size: int = 256 * MIB, repeats: int = 5) -> float:
    source, target = np.full(size, 1, dtype=np.uint8), np.full(size, 2, dtype=np.uint8)
    return median_gbps(size, repeats, lambda: np.copyto(target, source))


def run() -> dict[str, float]:
    from runtime import spawn

    results = {"memcpy_gbps": memcpy_gbps()}
    actor = spawn("shm_bench:Target")
    try:
        for label, (size, repeats) in ARG_SIZES.items():
            data = np.full(size, 1, dtype=np.uint8)
            results[f"arg_gbps_{label}"] = median_gbps(
                size, repeats, lambda data=data: actor.nbytes(data).result(timeout=60)
            )
        results["ret_gbps_64mib"] = median_gbps(
            RETURN_SIZE, RETURN_REPEATS, lambda: actor.make(RETURN_SIZE).result(timeout=60)
        )
    finally:
        actor.kill()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent, help="build to measure")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    repo = args.repo.resolve()
    os.chdir(repo)  # actor processes put the working directory first on their path
    sys.path[:0] = [str(repo), str(Path(__file__).resolve().parent)]
    results = run()
    for key, value in results.items():
        print(f"{key}: {value:.2f}", flush=True)
    if args.json:
        print(json.dumps({"repo": str(repo), **{key: round(value, 3) for key, value in results.items()}}))


if __name__ == "__main__":
    main()
