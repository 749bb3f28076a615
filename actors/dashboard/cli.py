"""``miles-dashboard RUN_DIR [--port P] [--host H] [--create]``: serve a run directory's dashboard until Ctrl-C."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from actors.dashboard.server import DashboardServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="miles-dashboard", description=__doc__)
    parser.add_argument("run_dir", type=Path, help="the collector's run directory (samples.jsonl, steps.jsonl)")
    parser.add_argument("--port", type=int, default=8265, help="port to listen on (0: any free port; default 8265)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--create", action="store_true", help="create RUN_DIR if missing (a run about to start)")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be 0..65535, got {args.port}")
    if args.create:
        args.run_dir.mkdir(parents=True, exist_ok=True)
    if not args.run_dir.is_dir():
        parser.error(
            f"no run was recorded in {args.run_dir} (the directory does not exist). Record one: `[dashboard] enabled "
            "= true` in hosts.toml (hosts.example.toml, which scripts/demo.sh runs, has it), or a collector pool whose "
            "run_dir it is; `--create` serves it empty for a run about to start"
        )
    try:
        server = DashboardServer(args.run_dir, host=args.host, port=args.port)
    except OSError as exc:
        parser.error(f"cannot listen on {args.host}:{args.port}: {exc} (pick another --port, or 0 for a free one)")
    print(f"miles-dashboard: {server.url} (run {server.store.run_dir})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
