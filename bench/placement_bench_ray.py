"""Ray's side of bench/placement_bench.py: the same SPREAD placement group of N one-CPU bundles and an actor in each
bundle, constructed and pinged, on a Ray cluster of ``--hosts`` nodes of ``--cpus`` CPUs on this machine
(``ray.cluster_utils.Cluster``: one raylet per node, as Ray's own multi-node tests run). Run it with Ray's Python
(../shared/bench-peers/README.md makes the virtualenv; never imported by the tests):

    $PEERS/ray/bin/python bench/placement_bench_ray.py --hosts 8 --actors 32 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import ray
from ray.cluster_utils import Cluster
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@ray.remote(num_cpus=1)
class Probe:
    def __init__(self, index: int = 0) -> None:
        self.index = index

    def ping(self) -> int:
        return self.index


def place_once(actors: int) -> dict[str, float]:
    started = time.monotonic()
    group = placement_group([{"CPU": 1}] * actors, strategy="SPREAD", name="bench")
    ray.get(group.ready(), timeout=120)
    grouped = time.monotonic()
    handles = [
        Probe.options(scheduling_strategy=PlacementGroupSchedulingStrategy(group, i)).remote(index=i)
        for i in range(actors)
    ]
    ray.get([handle.ping.remote() for handle in handles], timeout=300)
    ready = time.monotonic()
    for handle in handles:
        ray.kill(handle)
    remove_placement_group(group)
    return {"group_s": grouped - started, "ready_s": ready - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--cpus", type=int, default=4, help="CPUs per node")
    parser.add_argument("--actors", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": args.cpus})
    for _ in range(args.hosts - 1):
        cluster.add_node(num_cpus=args.cpus)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    try:
        runs = []
        for i in range(args.repeat):
            run = place_once(args.actors)
            runs.append(run)
            print(f"run {i}: group {run['group_s']:.3f}s, {args.actors} actors ready {run['ready_s']:.2f}s")
    finally:
        ray.shutdown()
        cluster.shutdown()
    summary = {
        "runtime": "ray",
        "hosts": args.hosts,
        "actors": args.actors,
        "group_s": round(statistics.median(run["group_s"] for run in runs), 4),
        "ready_s": round(statistics.median(run["ready_s"] for run in runs), 3),
        "repeat": len(runs),
    }
    print(f"median: group {summary['group_s']:.4f}s, {args.actors} actors ready {summary['ready_s']:.2f}s")
    if args.json:
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
