"""CPU cost of one call, caller and actor apart: the measure that a noisy shared machine disturbs least.

    python bench/cpu_per_call.py                      # µs of CPU per call (psutil), sync and async methods
    python bench/cpu_per_call.py --tree /tmp/wt_old   # the same, for another checkout (e.g. a previous build)

CPU time: ``calls`` pipelined calls (``window`` in flight) to one actor; user+system time of this process and of the
actor process (psutil) over the batch, divided by the calls; the median of ``--batches`` batches.
Alternate two builds (``--tree``) a few times in one session: CPU time still moves with the machine's load, but
far less than throughput does. (Instruction counts under valgrind were tried and moved even more: how many
messages one wake-up handles changes with timing, and so does the work per call.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD_ENV = "MILES_CPU_BENCH_CHILD"  # set in the interpreter that measures


def cpu_per_call(calls: int, window: int, batches: int, method: str) -> dict[str, float]:
    """µs of CPU per call for the caller and the actor (medians over batches)."""
    import psutil
    from bench_common import pipelined

    from runtime import spawn

    actor = spawn("bench_actors:Echo")
    try:
        call = getattr(actor, method)
        pipelined(call, 2000, window)  # warm up
        actor_process, me = psutil.Process(actor.pid), psutil.Process()
        caller, callee = [], []
        for _ in range(batches):
            mine, theirs = me.cpu_times(), actor_process.cpu_times()
            pipelined(call, calls, window)
            mine_after, theirs_after = me.cpu_times(), actor_process.cpu_times()
            caller.append((mine_after.user + mine_after.system - mine.user - mine.system) / calls * 1e6)
            callee.append((theirs_after.user + theirs_after.system - theirs.user - theirs.system) / calls * 1e6)
    finally:
        actor.kill()
    return {"caller_us": statistics.median(caller), "actor_us": statistics.median(callee)}


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'bench'}", CHILD_ENV: "1"}


def main(argv: list[str] | None = None) -> int:
    """Print the numbers (``--json``: one JSON line as well)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--tree", type=lambda p: Path(p).resolve(), default=HERE.parent, help="checkout to measure (default: this one)"
    )
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--method", default="noop", choices=["noop", "async_noop"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not os.environ.get(CHILD_ENV):  # the checkout measured (this one or --tree) in an interpreter of its own
        argv = [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]]
        # cwd too: ``python -m runtime.worker`` puts the working directory first on the actor's path
        return subprocess.run(argv, env=_env(args.tree), cwd=args.tree, check=False).returncode
    import runtime

    print(f"measuring {Path(runtime.__file__).parent.parent}", flush=True)
    result = cpu_per_call(args.calls, args.window, args.batches, args.method)
    print(f"{args.method}: µs of CPU per call: caller {result['caller_us']:.1f}, actor {result['actor_us']:.1f}")
    if args.json:
        print(json.dumps({"method": args.method, "tree": str(args.tree), **result}))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
