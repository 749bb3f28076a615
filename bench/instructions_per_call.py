"""Instructions per sync call (valgrind's callgrind), caller and actor apart: a cost that a noisy machine hardly moves.

    python bench/instructions_per_call.py                      # this checkout
    python bench/instructions_per_call.py --tree /tmp/prev     # another checkout (e.g. the previous build)

Each side runs under ``valgrind --tool=callgrind`` twice, once making ``--calls`` sync calls one after the other and
once making none (both after the same spawn and warm-up); the difference over ``--calls`` is the work of one call,
every thread of the process counted (ZeroMQ's I/O threads too). The caller does not spin while it waits
(``MILES_WAIT_SPIN_US=0``) and the actor is a fresh interpreter (``MILES_SPAWN_FORK_SERVER=0``), so that no poll
loop's length, which follows timing, enters the count. Two runs of one build still differ by a few per cent (how
many messages one wake-up finds); compare builds by alternating them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
CHILD_ENV = "MILES_INSTRUCTIONS_BENCH_CHILD"  # set in the interpreter that makes the calls
WARM_UP_CALLS = 200
TIMEOUT_S = 1800  # both sides under valgrind run some 50x slower than natively


def make_calls(calls: int) -> None:
    """The measured program: spawn an Echo, warm it up, make ``calls`` sync calls, stop it."""
    from runtime import spawn

    actor = spawn("bench_actors:Echo", deadline_s=600)
    try:
        for i in range(WARM_UP_CALLS + calls):
            assert actor.noop(i).result(timeout=120) == i
        os.kill(actor.pid, signal.SIGTERM)  # a clean exit, so that callgrind writes the actor's counts
        psutil.Process(actor.pid).wait(timeout=300)
    except psutil.NoSuchProcess:
        pass
    finally:
        actor.kill()


def _side(command: str) -> str | None:
    """Which process a callgrind file is of: the actor (a runtime worker), the caller (this script), or neither."""
    if "runtime.worker" in command:
        return "actor"
    return "caller" if Path(__file__).name in command else None


def _instructions(out_dir: Path) -> dict[str, int]:
    """Instructions per process in callgrind's files: the caller's and the actor's (by its command line)."""
    counts: dict[str, int] = {}
    for path in out_dir.glob("callgrind.out.*"):
        text = path.read_text(errors="replace")
        command = re.search(r"^cmd: (.*)$", text, re.MULTILINE)
        total = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
        if command is None or total is None:
            continue
        side = _side(command.group(1))
        if side is not None:
            counts[side] = counts.get(side, 0) + int(total.group(1))
    return counts


def run_under_valgrind(tree: Path, calls: int) -> dict[str, int]:
    """Instructions of the caller and the actor for one program making ``calls`` calls."""
    with tempfile.TemporaryDirectory(prefix="miles-callgrind-") as out:
        env = {
            **os.environ,
            "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'bench'}",
            CHILD_ENV: str(calls),
            "MILES_WAIT_SPIN_US": "0",
            "MILES_SPAWN_FORK_SERVER": "0",
        }
        command = [
            "valgrind",
            "--tool=callgrind",
            "--trace-children=yes",
            f"--callgrind-out-file={out}/callgrind.out.%p",
            sys.executable,
            str(Path(__file__).resolve()),
        ]
        done = subprocess.run(
            command, env=env, cwd=tree, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            raise SystemExit(f"valgrind run with {calls} calls failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        counts = _instructions(Path(out))
    missing = {"caller", "actor"} - counts.keys()
    if missing:
        raise SystemExit(f"no callgrind output for the {', '.join(sorted(missing))} in the run with {calls} calls")
    return counts


def main(argv: list[str] | None = None) -> int:
    """Print instructions per call (``--json``: one JSON line as well)."""
    if os.environ.get(CHILD_ENV):
        sys.path.insert(0, str(HERE))
        make_calls(int(os.environ[CHILD_ENV]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--tree", type=lambda p: Path(p).resolve(), default=HERE.parent, help="checkout to measure (default: this one)"
    )
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    print(f"measuring {args.tree}: {args.calls} calls and none, each under callgrind (minutes)", flush=True)
    base = run_under_valgrind(args.tree, 0)
    loaded = run_under_valgrind(args.tree, args.calls)
    per_call = {side: (loaded[side] - base[side]) / args.calls for side in ("caller", "actor")}
    print(f"instructions per sync call: caller {per_call['caller']:,.0f}, actor {per_call['actor']:,.0f}")
    if args.json:
        counts = {f"{side}_instructions": value for side, value in per_call.items()}
        print(json.dumps({"tree": str(args.tree), "calls": args.calls, **counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
