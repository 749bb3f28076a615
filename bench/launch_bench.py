"""Launch time: from start to every actor ready (spawned, bound, constructed), default 2 hosts x 4 actors.

The actor is ``launch_probe:Probe`` (a module importing nothing, so workers do not import the launcher).

    python bench/launch_bench.py                   # two local-provider hosts on this machine
    python bench/launch_bench.py --config hosts.toml --pool c   # your own cluster (SSH hosts), one pool's actors
    python bench/launch_bench.py --json            # last line: {"hosts": 2, "actors": 8, "ready_s": ...}
    python bench/launch_bench.py --netns 8 --actors-per-host 4   # 8 SSH hosts in network namespaces (root)

``ready_s`` is measured from before the host agents start to the moment every actor has answered a call.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from launcher.config.hosts_config import ClusterConfig, load_config, parse_config
from launcher.launch.worker_provider import WorkerProvider

HERE = Path(__file__).resolve().parent


def local_config(workdir: Path, hosts: int, per_host: int) -> ClusterConfig:
    """N local-provider hosts with ``per_host`` Probe actors each (SPREAD)."""
    lines = [f'[launcher]\nworkdir = "{workdir}/run"\nstop_grace_s = 3\n']
    for i in range(hosts):
        lines.append(
            f'[[hosts]]\nname = "bench{i}"\naddress = "localhost"\nprovider = "local"\npython = "{sys.executable}"\n'
            f'workdir = "{workdir}/bench{i}"\nenv = {{ PYTHONPATH = "{HERE}" }}\n'
        )
    lines.append('[job]\nentrypoint = "launch_bench:main"\n')
    lines.append(
        f'[[pools]]\nid = "c"\ncells = {hosts * per_host}\nstrategy = "SPREAD"\n'
        '[pools.worker]\nkind = "serve"\nactor_class = "launch_probe:Probe"\n'
    )
    return parse_config("\n".join(lines))


def launch_once(config: ClusterConfig, pool: str, *, steps: bool = False) -> dict[str, float]:
    """Start everything, ping every actor, tear down; timings in seconds (``steps``: print the launcher's)."""
    started = time.monotonic()
    progress = (
        (lambda message: print(f"  +{time.monotonic() - started:5.2f}s {message}", flush=True)) if steps else None
    )
    provider = WorkerProvider(config, progress=progress)
    try:
        provider.connect()
        connected = time.monotonic()
        provider.start_all()
        handles = provider.handles(pool)
        for handle in handles:
            handle.ping().result(timeout=30)
        ready = time.monotonic()
        actors = len(handles)
    finally:
        provider.close()
    return {
        "connect_s": connected - started,
        "ready_s": ready - started,
        "teardown_s": time.monotonic() - ready,
        "actors": actors,
        "hosts": len(provider.plan.hosts_used()),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the numbers."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, help="hosts.toml of a real cluster (default: 2 local hosts)")
    parser.add_argument("--pool", default="c", help="pool whose actors are pinged (with --config)")
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--actors-per-host", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--steps", action="store_true", help="print the launcher's steps with their times")
    parser.add_argument("--netns", type=int, metavar="N", help="N SSH hosts in network namespaces (needs root)")
    args = parser.parse_args(argv)
    if args.netns:
        return _on_namespace_cluster(args)
    logging.basicConfig(level=logging.WARNING)
    sys.path.insert(0, str(HERE))
    with tempfile.TemporaryDirectory(prefix="launch-bench-") as tmp:
        config = load_config(args.config) if args.config else local_config(Path(tmp), args.hosts, args.actors_per_host)
        runs = [launch_once(config, args.pool, steps=args.steps) for _ in range(args.repeat)]
    for i, run in enumerate(runs):
        print(
            f"run {i}: {run['hosts']:.0f} hosts x {run['actors']:.0f} actors: connect {run['connect_s']:.2f}s, "
            f"all ready {run['ready_s']:.2f}s, teardown {run['teardown_s']:.2f}s"
        )
    ready = [run["ready_s"] for run in runs]
    summary = {
        "hosts": int(runs[0]["hosts"]),
        "actors": int(runs[0]["actors"]),
        "ready_s": round(statistics.median(ready), 3),
        "ready_s_min": round(min(ready), 3),
        "connect_s": round(statistics.median(run["connect_s"] for run in runs), 3),
        "teardown_s": round(statistics.median(run["teardown_s"] for run in runs), 3),
        "repeat": len(runs),
    }
    print(f"median time to all {summary['actors']} actors ready on {summary['hosts']} hosts: {summary['ready_s']:.2f}s")
    if args.json:
        print(json.dumps(summary))
    return 0


def _on_namespace_cluster(args: argparse.Namespace) -> int:
    """Make the cluster, then run this benchmark on its hosts.toml from the launcher's namespace."""
    from netns_cluster import namespace_cluster

    with namespace_cluster(args.netns) as cluster, tempfile.TemporaryDirectory(prefix="launch-bench-") as tmp:
        config = Path(tmp) / "hosts.toml"
        config.write_text(
            f'[launcher]\nworkdir = "{tmp}/run"\nstop_grace_s = 3\n\n'
            + cluster.hosts_toml(python=sys.executable, pythonpath=str(HERE))
            + '\n[job]\nentrypoint = "launch_bench:main"\n\n'
            f'[[pools]]\nid = "c"\ncells = {args.netns * args.actors_per_host}\nstrategy = "SPREAD"\n'
            '[pools.worker]\nkind = "serve"\nactor_class = "launch_probe:Probe"\n'
        )
        argv = [*cluster.exec_argv(), sys.executable, str(Path(__file__).resolve()), "--config", str(config)]
        argv += ["--repeat", str(args.repeat), *(["--json"] if args.json else []), *(["--steps"] if args.steps else [])]
        return subprocess.run(argv, check=False, env={**os.environ, "PYTHONPATH": f"{HERE.parent}"}).returncode


if __name__ == "__main__":
    sys.exit(main())
