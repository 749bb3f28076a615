"""Runtime benchmark: spawn time, call latency, pipelined throughput, N:N, group calls, transfer GB/s.

Run ``python bench/actor_bench.py`` (add ``--json`` for one JSON object as the last line). Sync calls are
measured as the peer benchmarks do (2000 calls, each timed alone), then round trips of a bare ZeroMQ echo server in
another process, so the latency can be read as a ratio to that floor on a noisy machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import percentile, pipelined

from runtime import ActorGroup, spawn, spawn_many

MIB = 1 << 20


RAW_ECHO_SERVER = """
import os, sys, zmq
server = zmq.Context.instance().socket(zmq.ROUTER)
port = server.bind_to_random_port("tcp://127.0.0.1")
unix = f"ipc://@miles-bench-echo-{os.getpid()}"
server.bind(unix)
print(port, unix, flush=True)
while True:
    frames = server.recv_multipart(copy=False)
    if frames[1].bytes == b"stop":
        break
    server.send_multipart([frames[0], frames[1]])
"""


class RawZmqEcho:
    """A bare blocking ZeroMQ echo server in another process: the floor under any actor call on this machine.

    It listens on loopback TCP and on an abstract Unix socket (what same-host actor calls use).
    """

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", RAW_ECHO_SERVER], stdout=subprocess.PIPE, text=True)
        port, unix = self.process.stdout.readline().split()
        context = zmq.Context.instance()
        self.clients = {"tcp": context.socket(zmq.DEALER), "unix": context.socket(zmq.DEALER)}
        self.clients["tcp"].connect(f"tcp://127.0.0.1:{port}")
        self.clients["unix"].connect(unix)

    def round_trip_s(self, payload: bytes, transport: str = "tcp") -> float:
        client = self.clients[transport]
        started = time.perf_counter()
        client.send(payload, copy=len(payload) < 65536)
        client.recv(copy=False)
        return time.perf_counter() - started

    def close(self) -> None:
        self.clients["tcp"].send(b"stop")
        self.process.wait(10)
        for client in self.clients.values():
            client.close(linger=0)


def sync_latency(echo: Any, raw: RawZmqEcho, calls: int) -> tuple[list[float], dict[str, list[float]]]:
    """``calls`` sync call latencies, each timed alone one after the other (as the peers' benchmarks do), then as
    many raw ZeroMQ round trips per transport. The two are not interleaved: the first call after a burst of raw
    round trips finds the actor's threads asleep and costs 4-8x a warm one, which is a cost of going idle, not of
    the call path (``idle_call_us`` measures it on its own)."""
    actor_samples: list[float] = []
    for i in range(calls):
        started = time.perf_counter()
        echo.noop(i).result(timeout=10)
        actor_samples.append(time.perf_counter() - started)
    raw_samples = {transport: [raw.round_trip_s(b"x", transport) for _ in range(calls)] for transport in raw.clients}
    return actor_samples, raw_samples


def idle_call_us(echo: Any, idle_s: float, calls: int) -> float:
    """p50 of a call made after ``idle_s`` of silence (both ends' threads asleep), in µs."""
    samples = []
    for i in range(calls):
        time.sleep(idle_s)
        started = time.perf_counter()
        echo.noop(i).result(timeout=10)
        samples.append(time.perf_counter() - started)
    return percentile(samples, 50) * 1e6


def group_p50_us(members: list[Any], calls: int) -> float:
    """p50 of a group call (every member's ``noop``, all results back), in µs."""
    group = ActorGroup(members)
    for i in range(20):  # warm up every connection
        group.noop(i).result(timeout=30)
    samples = []
    for i in range(calls):
        started = time.perf_counter()
        group.noop(i).result(timeout=30)
        samples.append(time.perf_counter() - started)
    return percentile(samples, 50) * 1e6


def raw_gbps(raw: RawZmqEcho, size: int, repeats: int) -> float:
    """Bytes/s of ``size``-byte messages echoed by the raw server (counted one way, as the actor benchmark)."""
    data = bytes(size)
    raw.round_trip_s(data)
    return repeats * size / sum(raw.round_trip_s(data) for _ in range(repeats)) / 1e9


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
    raw = RawZmqEcho()
    started = time.perf_counter()
    actors = spawn_many("bench_actors:Echo", 8)
    results["spawn_s_per_actor"] = (time.perf_counter() - started) / 8
    print(f"spawn: 8 actors in {results['spawn_s_per_actor'] * 8:.2f} s", flush=True)
    ActorGroup(actors[2:]).kill()
    psutil.wait_procs([psutil.Process(a.pid) for a in actors[2:] if psutil.pid_exists(a.pid)], timeout=30)
    time.sleep(1.0)  # the latency below must not share the CPU with six processes exiting
    echo, other = actors[0], actors[1]

    for i in range(200):  # warm up, as the peers' benchmarks do
        echo.noop(i).result(timeout=10)
        raw.round_trip_s(b"x")
    samples, raw_samples = sync_latency(echo, raw, 2000)
    results["sync_p50_us"] = percentile(samples, 50) * 1e6
    results["sync_p99_us"] = percentile(samples, 99) * 1e6
    raw_p50_us = {transport: percentile(values, 50) * 1e6 for transport, values in raw_samples.items()}
    results["idle_call_p50_us"] = idle_call_us(echo, 0.05, 50)
    used = "unix" if str(echo.connection.transport_address).startswith("ipc://") else "tcp"
    print(
        f"sync call latency: p50 {results['sync_p50_us']:.0f} us, p99 {results['sync_p99_us']:.0f} us; "
        f"raw ZeroMQ round trip to another process: p50 {raw_p50_us['tcp']:.0f} us over TCP, "
        f"{raw_p50_us['unix']:.0f} us over a Unix socket (actor call over {used} / raw over {used} = "
        f"{results['sync_p50_us'] / raw_p50_us[used]:.2f}); "
        f"p99/p50 {results['sync_p99_us'] / results['sync_p50_us']:.2f}; "
        f"a call after 50 ms idle: p50 {results['idle_call_p50_us']:.0f} us",
        flush=True,
    )
    print(f"raw ZeroMQ echo over TCP, 64 MiB: {raw_gbps(raw, 64 * MIB, 3):.2f} GB/s", flush=True)
    raw.close()

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

    members = [echo, other, *spawn_many("bench_actors:Echo", 30)]
    for size in (8, 32):
        results[f"group_p50_us_{size}"] = group_p50_us(members[:size], 300)
        print(
            f"group call over {size} actors: p50 {results[f'group_p50_us_{size}']:.0f} us "
            f"({results[f'group_p50_us_{size}'] / results['sync_p50_us']:.1f}x one call)",
            flush=True,
        )
    ActorGroup(members[2:]).kill()

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
