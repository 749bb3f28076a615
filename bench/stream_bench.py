"""Streaming results: items per second from a generator method to its caller, by backpressure window.

    python bench/stream_bench.py            # sync and async generators, windows 1, 16, 256
    python bench/stream_bench.py --json     # ... and one JSON object as the last line

Each run streams ``--items`` small items (ints) from one actor process and times the caller's loop; the median
of ``--rounds`` rounds. Read it against ``actor_bench.py``'s pipelined calls/s of the same run: one item costs
far less than one call once the window lets the producer run ahead.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import AsyncIterator, Iterator

from runtime import spawn


class Numbers:
    def count(self, n: int) -> Iterator[int]:
        yield from range(n)

    async def acount(self, n: int) -> AsyncIterator[int]:
        for i in range(n):
            yield i


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    handle = spawn(Numbers)
    results: dict[str, float] = {}
    try:
        for method in ("count", "acount"):
            for window in (1, 16, 256):
                rates = []
                for _ in range(args.rounds):
                    started = time.perf_counter()
                    total = sum(getattr(handle, method).options(window=window)(args.items))
                    rates.append(args.items / (time.perf_counter() - started))
                    assert total == args.items * (args.items - 1) // 2
                results[f"{method}_window{window}_items_per_s"] = statistics.median(rates)
                print(f"{method:6s} window={window:<4d} {statistics.median(rates):10.0f} items/s")
    finally:
        handle.kill()
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
