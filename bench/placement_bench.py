"""Run-time placement: from a job, one SPREAD placement group of N one-CPU bundles over the launch's hosts, then an
actor spawned into each bundle, constructed and pinged (default 8 hosts x 4 CPUs, 32 actors).

    python bench/placement_bench.py                 # 8 local-provider hosts on this machine
    python bench/placement_bench.py --hosts 4 --actors 16 --repeat 5 --json
    # Ray's side, same shape, on a Ray cluster of 8 nodes on this machine (ray.cluster_utils.Cluster):
    $PEERS/ray/bin/python bench/placement_bench_ray.py --hosts 8 --actors 32

Timed from before ``create_group`` to the moment every actor has answered a ping (``group_s``: the group alone);
the hosts' agents are up before the clock starts, as a Ray cluster's raylets are.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from launcher.config.hosts_config import ClusterConfig, parse_config
from launcher.launch.worker_provider import WorkerProvider
from runtime import placement, spawn_async
from runtime.internals import ClientRuntime
from runtime.placement import ResourceRequest
from transport.security import CURVE_DIR_ENV

HERE = Path(__file__).resolve().parent


def local_config(workdir: Path, hosts: int, cpus: int) -> ClusterConfig:
    """``hosts`` local-provider hosts of ``cpus`` CPUs each; one small pool on the first (a launch needs one)."""
    lines = [f'[launcher]\nworkdir = "{workdir}/run"\nstop_grace_s = 3\n']
    for i in range(hosts):
        lines.append(
            f'[[hosts]]\nname = "bench{i}"\naddress = "localhost"\nprovider = "local"\npython = "{sys.executable}"\n'
            f'workdir = "{workdir}/bench{i}"\ncpus = {cpus}\nenv = {{ PYTHONPATH = "{HERE}" }}\n'
        )
    lines.append('[job]\nentrypoint = "launch_bench:main"\n')
    lines.append(
        '[[pools]]\nid = "c"\nhosts = ["bench0"]\n[pools.worker]\nkind = "serve"\nactor_class = "launch_probe:Probe"\n'
    )
    return parse_config("\n".join(lines))


def place_once(actors: int) -> dict[str, float]:
    """One group of ``actors`` bundles and an actor in each; timings in seconds."""
    started = time.monotonic()
    group = placement.create_group([{"CPU": 1}] * actors, "SPREAD", name="bench")
    grouped = time.monotonic()

    async def all_actors() -> None:  # started at once, as Ray's .remote() returns at once
        handles = await asyncio.gather(*(
            spawn_async("launch_probe:Probe", kwargs={"index": i},
                        placement=ResourceRequest(resources={"CPU": 1}, group_id=group.group_id, bundle_index=i))
            for i in range(actors)
        ))  # fmt: skip
        await asyncio.gather(*(handle.ping() for handle in handles))
        for handle in handles:
            handle.kill()

    ClientRuntime.get().run(all_actors(), timeout_s=300, what="place the actors")
    ready = time.monotonic()
    hosts = len({bundle.host for bundle in group.bundles})
    placement.remove_group(group)
    return {"group_s": grouped - started, "ready_s": ready - started, "hosts": hosts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--cpus", type=int, default=4, help="CPUs per host")
    parser.add_argument("--actors", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    sys.path.insert(0, str(HERE))
    with tempfile.TemporaryDirectory(prefix="placement-bench-") as tmp:
        with WorkerProvider(local_config(Path(tmp), args.hosts, args.cpus)) as provider:
            provider.start_all()
            os.environ[CURVE_DIR_ENV] = provider.curve_dir or ""  # as miles-launch does for its job
            runs = []
            for i in range(args.repeat):
                run = place_once(args.actors)
                runs.append(run)
                print(f"run {i}: group {run['group_s']:.3f}s, {args.actors} actors ready {run['ready_s']:.2f}s "
                      f"over {run['hosts']:.0f} hosts")  # fmt: skip
    summary = {
        "runtime": "miles",
        "hosts": args.hosts,
        "actors": args.actors,
        "group_s": round(statistics.median(run["group_s"] for run in runs), 4),
        "ready_s": round(statistics.median(run["ready_s"] for run in runs), 3),
        "repeat": len(runs),
    }
    print(
        f"median: group {summary['group_s']:.4f}s, {args.actors} actors on {args.hosts} hosts {summary['ready_s']:.2f}s"
    )
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
