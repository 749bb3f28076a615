"""What CURVE costs: calls/s, latency and 64 MiB transfer GB/s with and without CURVE, over shared memory and TCP.

Run ``python bench/curve_bench.py`` (``--json`` adds one JSON object as the last line). Between processes of
one machine, large buffers normally go through shared memory and only their names cross the (encrypted)
socket, so CURVE barely matters there; ``MILES_SHM=0`` with ``MILES_SAME_HOST_IPC=0`` puts every byte on
TCP, which is what crossing hosts costs. A raw ZeroMQ baseline (two sockets in one process, no runtime) shows
libzmq's own CURVE ceiling.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import pipelined

from runtime import spawn
from transport import local_twin, security, shared_memory
from transport.security import CurveConfig
from transport.zap_gate import ZapGate

MIB = 1 << 20
log = logging.getLogger("curve_bench")


def raw_zmq_gbps(curve: CurveConfig | None, size: int = 64 * MIB, repeats: int = 5) -> float:
    """64 MiB round trips (data one way, a byte back) between a DEALER and a ROUTER over loopback TCP."""
    context = zmq.Context()
    server = context.socket(zmq.ROUTER)
    client = context.socket(zmq.DEALER)
    try:
        if curve is not None:
            keys = security.ServerKeys.new()
            security.secure_server(server, keys)
            ZapGate.of(context).guard(server, max_connections=16, curve_keys=curve.authorized_clients)
            security.secure_client(client, curve, keys.public)
        port = server.bind_to_random_port("tcp://127.0.0.1")

        def serve() -> None:
            for _ in range(repeats + 1):
                frames = server.recv_multipart(copy=False)
                server.send_multipart([frames[0], b"k"])

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        client.connect(f"tcp://127.0.0.1:{port}")
        data = np.ones(size, dtype=np.uint8)
        client.send(memoryview(data), copy=False)  # warm up (handshake)
        if not client.poll(60_000):
            raise TimeoutError("raw ZeroMQ baseline: no answer within 60 s")
        client.recv()
        started = time.perf_counter()
        for _ in range(repeats):
            client.send(memoryview(data), copy=False)
            if not client.poll(60_000):
                raise TimeoutError("raw ZeroMQ baseline: no answer within 60 s")
            client.recv()
        elapsed = time.perf_counter() - started
        thread.join(10)
        return repeats * size / elapsed / 1e9
    finally:
        client.close(linger=0)
        server.close(linger=0)
        ZapGate.stop(context)
        context.destroy(linger=0)


# Shared memory for large buffers and the Unix-socket twin for the socket: off, calls travel as between hosts.
_SAME_HOST_PATHS = (shared_memory.SHM_ENV, local_twin.ENV)


def measure(curve_dir: str | None, shm: bool, calls: int) -> dict[str, float]:
    """One actor with this configuration: calls/s, sync p50 latency, 64 MiB argument and return GB/s."""
    for variable in _SAME_HOST_PATHS:  # read by this process's connection and the child's
        os.environ[variable] = "1" if shm else "0"
    actor = spawn("bench_actors:Echo", curve_dir=curve_dir)
    try:
        pipelined(actor.noop, 1000, 200)  # warm up
        result = {"calls_per_s": pipelined(actor.noop, calls, 500)}
        samples = []
        for i in range(500):
            started = time.perf_counter()
            actor.noop(i).result(timeout=10)
            samples.append(time.perf_counter() - started)
        result["sync_p50_us"] = float(np.percentile(samples, 50)) * 1e6
        data = np.ones(64 * MIB, dtype=np.uint8)
        actor.nbytes(data).result(timeout=60)
        started = time.perf_counter()
        for _ in range(5):
            actor.nbytes(data).result(timeout=60)
        result["arg_gbps_64mib"] = 5 * data.nbytes / (time.perf_counter() - started) / 1e9
        actor.make(64 * MIB).result(timeout=60)
        started = time.perf_counter()
        for _ in range(5):
            actor.make(64 * MIB).result(timeout=60)
        result["ret_gbps_64mib"] = 5 * 64 * MIB / (time.perf_counter() - started) / 1e9
        return result
    finally:
        actor.kill()


def run(calls: int) -> dict[str, float]:
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="miles-curve-bench-") as tmp:
        keys = security.generate_cluster_keys(Path(tmp) / "keys")
        for label, config in (("plain", None), ("curve", keys)):
            results[f"raw_zmq_{label}_gbps_64mib"] = raw_zmq_gbps(config)
            print(f"raw ZeroMQ {label:5s}: 64 MiB {results[f'raw_zmq_{label}_gbps_64mib']:.2f} GB/s", flush=True)
        previous = {variable: os.environ.get(variable) for variable in _SAME_HOST_PATHS}
        try:
            for transfer, shm in (("shm", True), ("tcp", False)):
                for label, curve_dir in (("plain", None), ("curve", keys.directory)):
                    row = measure(curve_dir, shm, calls)
                    for key, value in row.items():
                        results[f"{label}_{transfer}_{key}"] = value
                    print(
                        f"{label:5s} {transfer}: {row['calls_per_s']:7.0f} calls/s, sync p50 "
                        f"{row['sync_p50_us']:5.0f} us, 64 MiB argument {row['arg_gbps_64mib']:5.2f} GB/s, "
                        f"return {row['ret_gbps_64mib']:5.2f} GB/s",
                        flush=True,
                    )
        finally:
            for variable, value in previous.items():
                if value is None:
                    os.environ.pop(variable, None)
                else:
                    os.environ[variable] = value
    for transfer in ("shm", "tcp"):
        for key in ("calls_per_s", "arg_gbps_64mib"):
            ratio = results[f"curve_{transfer}_{key}"] / results[f"plain_{transfer}_{key}"]
            results[f"curve_over_plain_{transfer}_{key}"] = ratio
            print(f"CURVE / plain, {transfer} {key}: {ratio:.2f}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--calls", type=int, default=10000, help="pipelined calls per configuration")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    results = run(args.calls)
    if args.json:
        print(json.dumps({key: round(value, 3) for key, value in results.items()}))


if __name__ == "__main__":
    main()
