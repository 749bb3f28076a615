"""Runtime benchmark: spawn time, call latency, pipelined throughput, N:N, transfer GB/s.

Run ``python bench/actor_bench.py`` (add ``--json`` for one JSON object as the last line). A raw ZeroMQ
baseline measured in the same run is printed first, so numbers can be read as ratios on a noisy machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import percentile, pipelined

from runtime import ActorGroup, spawn, spawn_many

MIB = 1 << 20


def raw_zmq_baseline() -> dict[str, float]:
    """Round-trip latency and 64 MiB throughput of bare blocking ZeroMQ sockets in two threads."""
    context = zmq.Context.instance()
    server = context.socket(zmq.ROUTER)
    port = server.bind_to_random_port("tcp://127.0.0.1")

    def serve() -> None:
        while True:
            frames = server.recv_multipart(copy=False)
            if frames[1].bytes == b"stop":
                return
            server.send_multipart([frames[0], b"ok"])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = context.socket(zmq.DEALER)
    client.connect(f"tcp://127.0.0.1:{port}")
    samples = []
    for _ in range(1000):
        started = time.perf_counter()
        client.send(b"x")
        client.recv()
        samples.append(time.perf_counter() - started)
    data = np.zeros(64 * MIB, dtype=np.uint8)
    started = time.perf_counter()
    for _ in range(3):
        client.send(memoryview(data), copy=False)
        client.recv()
    gbps = 3 * data.nbytes / (time.perf_counter() - started) / 1e9
    client.send(b"stop")
    thread.join(5)
    client.close(linger=0)
    server.close(linger=0)
    return {"raw_zmq_rtt_p50_us": percentile(samples, 50) * 1e6, "raw_zmq_gbps_64mib": gbps}


def transfer_gbps(actor: Any, size: int, repeats: int) -> float:
    data = np.ones(size, dtype=np.uint8)
    actor.nbytes(data).result(timeout=60)  # warm up
    started = time.perf_counter()
    for _ in range(repeats):
        assert actor.nbytes(data).result(timeout=60) == size
    return repeats * size / (time.perf_counter() - started) / 1e9


def return_gbps(actor: Any, size: int, repeats: int) -> float:
    actor.make(size).result(timeout=60)
    started = time.perf_counter()
    for _ in range(repeats):
        assert actor.make(size).result(timeout=60).nbytes == size
    return repeats * size / (time.perf_counter() - started) / 1e9


def run() -> dict[str, float]:
    results: dict[str, float] = {}
    baseline = raw_zmq_baseline()
    print(
        f"raw ZeroMQ baseline: rtt p50 {baseline['raw_zmq_rtt_p50_us']:.0f} us, "
        f"64 MiB {baseline['raw_zmq_gbps_64mib']:.2f} GB/s",
        flush=True,
    )

    started = time.perf_counter()
    actors = spawn_many("bench_actors:Echo", 8)
    results["spawn_s_per_actor"] = (time.perf_counter() - started) / 8
    print(f"spawn: 8 actors in {results['spawn_s_per_actor'] * 8:.2f} s", flush=True)
    ActorGroup(actors[2:]).kill()
    echo, other = actors[0], actors[1]

    for i in range(200):
        echo.noop(i).result(timeout=10)
    samples = []
    for i in range(2000):
        started = time.perf_counter()
        echo.noop(i).result(timeout=10)
        samples.append(time.perf_counter() - started)
    results["sync_p50_us"] = percentile(samples, 50) * 1e6
    results["sync_p99_us"] = percentile(samples, 99) * 1e6
    print(f"sync call latency: p50 {results['sync_p50_us']:.0f} us, p99 {results['sync_p99_us']:.0f} us", flush=True)

    results["pipelined_calls_per_s"] = pipelined(echo.noop, 20000, 1000)
    print(f"1->1 pipelined: {results['pipelined_calls_per_s']:.0f} calls/s (20000 calls, 1000 in flight)", flush=True)

    async_actor = spawn("bench_actors:Echo", max_concurrency=100)
    results["async_actor_calls_per_s"] = pipelined(async_actor.async_noop, 10000, 100)
    print(f"async actor: {results['async_actor_calls_per_s']:.0f} calls/s (max concurrency 100)", flush=True)
    async_actor.kill()

    drivers = ActorGroup(spawn_many("bench_actors:Driver", 2))
    calls_each = 10000
    started = time.perf_counter()
    drivers.drive([echo, other], calls_each, 500).result(timeout=120)
    results["nn_calls_per_s"] = 2 * calls_each / (time.perf_counter() - started)
    print(f"N:N 2 callers x 2 actors: {results['nn_calls_per_s']:.0f} calls/s", flush=True)
    drivers.kill()

    for label, size, repeats in (("1mib", MIB, 200), ("64mib", 64 * MIB, 10), ("256mib", 256 * MIB, 3)):
        results[f"arg_gbps_{label}"] = transfer_gbps(echo, size, repeats)
        print(f"argument transfer {label}: {results[f'arg_gbps_{label}']:.2f} GB/s", flush=True)
    results["ret_gbps_64mib"] = return_gbps(echo, 64 * MIB, 10)
    print(f"return transfer 64mib: {results['ret_gbps_64mib']:.2f} GB/s", flush=True)
    echo.kill()
    other.kill()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    results = run()
    if args.json:
        print(json.dumps({key: round(value, 3) for key, value in results.items()}))


if __name__ == "__main__":
    main()
