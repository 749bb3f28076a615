"""A lossy link between DEALER clients and an actor's ROUTER: drops, delays (reorders) and duplicates messages.

Run ``python lossy_proxy.py --target tcp://127.0.0.1:PORT --drop 0.05 --dup 0.05 --delay 0.2``: it binds a
ROUTER on loopback, prints ``LOSSY_PROXY_READY {"address": ...}`` and forwards whole multipart messages both ways
(one backend DEALER per client, with the client's routing id, so the actor can push results). On SIGTERM it
prints ``LOSSY_PROXY_STATS {...}`` (messages forwarded, dropped, duplicated, delayed) and exits.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import random
import signal
import sys
import time
from typing import Any

import zmq

READY = "LOSSY_PROXY_READY "
STATS = "LOSSY_PROXY_STATS "


class LossyLink:
    def __init__(self, target: str, *, drop: float, dup: float, delay: float, max_delay_s: float, seed: int) -> None:
        self.context = zmq.Context()
        self.front = self.context.socket(zmq.ROUTER)
        self.front.setsockopt(zmq.LINGER, 0)
        self.front.setsockopt(zmq.ROUTER_HANDOVER, 1)
        port = self.front.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"
        self.target = target
        self.backs: dict[bytes, zmq.Socket] = {}
        self.identities: dict[zmq.Socket, bytes] = {}
        self.poller = zmq.Poller()
        self.poller.register(self.front, zmq.POLLIN)
        self.rng = random.Random(seed)
        self.drop, self.dup, self.delay, self.max_delay_s = drop, dup, delay, max_delay_s
        self.due: list[tuple[float, int, zmq.Socket, list[bytes]]] = []
        self.order = itertools.count()
        self.stats = {"forwarded": 0, "dropped": 0, "duplicated": 0, "delayed": 0}
        self.running = True

    def backend(self, identity: bytes) -> zmq.Socket:
        socket = self.backs.get(identity)
        if socket is None:
            socket = self.context.socket(zmq.DEALER)
            socket.setsockopt(zmq.LINGER, 0)
            socket.setsockopt(zmq.ROUTING_ID, identity)
            socket.connect(self.target)
            self.backs[identity] = socket
            self.identities[socket] = identity
            self.poller.register(socket, zmq.POLLIN)
        return socket

    def schedule(self, socket: zmq.Socket, frames: list[bytes]) -> None:
        """Decide the fate of one message."""
        roll = self.rng.random()
        if roll < self.drop:
            self.stats["dropped"] += 1
            return
        copies = 2 if self.rng.random() < self.dup else 1
        self.stats["duplicated"] += copies - 1
        for _ in range(copies):
            wait = self.rng.uniform(0, self.max_delay_s) if self.rng.random() < self.delay else 0.0
            if wait:
                self.stats["delayed"] += 1
            heapq.heappush(self.due, (time.monotonic() + wait, next(self.order), socket, frames))

    def flush_due(self) -> float:
        """Send what is due; returns seconds until the next delayed message (or 0.1)."""
        now = time.monotonic()
        while self.due and self.due[0][0] <= now:
            _, _, socket, frames = heapq.heappop(self.due)
            socket.send_multipart(frames)
            self.stats["forwarded"] += 1
        return min(0.1, self.due[0][0] - now) if self.due else 0.1

    def run(self) -> None:
        while self.running:
            timeout_ms = max(0, int(self.flush_due() * 1000))
            for socket, _ in self.poller.poll(timeout_ms):
                for _ in range(256):
                    try:
                        frames = socket.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if socket is self.front:
                        self.schedule(self.backend(frames[0]), frames[1:])
                    else:
                        self.schedule(self.front, [self.identities[socket], *frames])

    def close(self) -> None:
        self.context.destroy(linger=0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--target", required=True)
    parser.add_argument("--drop", type=float, default=0.05, help="probability a message is lost")
    parser.add_argument("--dup", type=float, default=0.05, help="probability a message is sent twice")
    parser.add_argument("--delay", type=float, default=0.2, help="probability a message is held back")
    parser.add_argument("--max-delay", type=float, default=0.05, help="longest hold, seconds")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    link = LossyLink(
        args.target, drop=args.drop, dup=args.dup, delay=args.delay, max_delay_s=args.max_delay, seed=args.seed
    )

    def stop(*_: Any) -> None:
        link.running = False

    signal.signal(signal.SIGTERM, stop)
    sys.stdout.write(READY + json.dumps({"address": link.address}) + "\n")
    sys.stdout.flush()
    try:
        link.run()
    finally:
        sys.stdout.write(STATS + json.dumps(link.stats) + "\n")
        sys.stdout.flush()
        link.close()


if __name__ == "__main__":
    main()
