"""Same-host round-trip floors (issue 30's sync p99): where a synchronous call's time goes below the runtime.

One run, interleaved, idle and then with a busy/idle process on every core (``--load``): a round trip of a
100-byte message over

- ``zmq``: a DEALER/ROUTER pair on an abstract ipc socket, what a same-host call rides today (each side's
  ZeroMQ I/O thread carries every message: six thread wake-ups per round trip),
- ``unix``: a plain Unix stream socket, the caller blocked in ``recv`` (two wake-ups: the server, the caller),
- ``runtime``: a synchronous actor call (``echo.noop(i).result()``), over the first.

The gap between ``zmq`` and ``unix`` is what a same-host path that bypasses ZeroMQ's I/O threads could win.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_common import percentile

_PAYLOAD = b"x" * 100
_STOP = b"stop"


def _zmq_echo(name: str) -> None:
    context = zmq.Context()
    server = context.socket(zmq.ROUTER)
    server.bind(f"ipc://@{name}")
    while (frames := server.recv_multipart())[1] != _STOP:
        server.send_multipart(frames)
    context.destroy(linger=0)


def _unix_echo(name: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen()
    peer, _ = listener.accept()
    while (data := peer.recv(65536)) and not data.endswith(_STOP):
        peer.sendall(data)


def _busy(stop: mp.synchronize.Event) -> None:
    """2 ms busy, 1 ms asleep: a core shared with work that yields now and then."""
    while not stop.is_set():
        until = time.perf_counter() + 0.002
        while time.perf_counter() < until:
            pass
        time.sleep(0.001)


_WARM_UP = 200
_REPLY_TIMEOUT_S = 10.0  # a round trip that takes longer means the echo server died: fail, never hang


def _timed(round_trip: Callable[[], object], calls: int) -> list[float]:
    """Seconds per ``round_trip()`` over ``calls`` calls, after ``_WARM_UP`` untimed ones."""
    for _ in range(_WARM_UP):
        round_trip()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        round_trip()
        samples.append(time.perf_counter() - started)
    return samples


def _zmq_round_trips(name: str, calls: int) -> list[float]:
    context = zmq.Context()
    client = context.socket(zmq.DEALER)
    client.setsockopt(zmq.RCVTIMEO, int(_REPLY_TIMEOUT_S * 1000))
    client.connect(f"ipc://@{name}")
    try:
        return _timed(lambda: (client.send(_PAYLOAD), client.recv()), calls)
    finally:
        client.send(_STOP)
        time.sleep(0.05)
        context.destroy(linger=0)


def _unix_round_trips(name: str, calls: int) -> list[float]:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(_REPLY_TIMEOUT_S)
    deadline = time.monotonic() + 5
    while True:
        try:
            client.connect("\0" + name)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    try:
        return _timed(lambda: (client.sendall(_PAYLOAD), client.recv(65536)), calls)
    finally:
        client.sendall(_STOP)
        client.close()


_ECHOES = {"zmq": (_zmq_echo, _zmq_round_trips), "unix": (_unix_echo, _unix_round_trips)}


def _measure(kind: str, calls: int, echo: object) -> list[float]:
    if kind == "runtime":
        return _timed(lambda: echo.noop(0).result(timeout=_REPLY_TIMEOUT_S), calls)  # type: ignore[attr-defined]
    serve, measure = _ECHOES[kind]
    name = f"miles-floor-{os.getpid()}-{kind}-{time.monotonic_ns()}"
    server = mp.Process(target=serve, args=(name,), daemon=True)
    server.start()
    time.sleep(0.2)
    try:
        return measure(name, calls)
    finally:
        server.join(5)
        if server.is_alive():
            server.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from runtime import spawn

    echo = spawn("bench_actors:Echo")
    results: dict[str, float] = {}
    try:
        for load in (False, True):
            stop = mp.Event()
            busy = [mp.Process(target=_busy, args=(stop,), daemon=True) for _ in range(os.cpu_count() or 1)]
            for process in busy if load else []:
                process.start()
            try:
                samples: dict[str, list[float]] = {"zmq": [], "unix": [], "runtime": []}
                for _ in range(args.rounds):
                    for kind in samples:
                        samples[kind] += _measure(kind, args.calls, echo)
            finally:
                stop.set()
                for process in busy if load else []:
                    process.join(5)
            tag = "load" if load else "idle"
            for kind, values in samples.items():
                p50, p99 = percentile(values, 50) * 1e6, percentile(values, 99) * 1e6
                results[f"{kind}_{tag}_p50_us"], results[f"{kind}_{tag}_p99_us"] = p50, p99
                line = f"{tag:4}  {kind:7}  p50 {p50:7.1f} µs   p99 {p99:7.1f} µs   p99/p50 {p99 / p50:4.2f}"
                print(line, flush=True)
    finally:
        echo.kill()  # type: ignore[attr-defined]
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
