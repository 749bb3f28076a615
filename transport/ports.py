"""Ports handed out to be bound later by another process (a worker, a rank's rendezvous, a router): drawn below the
kernel's ephemeral range, where no ``bind(0)`` or outgoing connection can take them meanwhile."""

from __future__ import annotations

import random
import socket
from collections.abc import Sequence

EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST_PORT = 10000  # handed-out ports are drawn from here up to the kernel's ephemeral range
_MIN_POOL = 1000


def free_ports(
    count: int, handed_out: set[int], *, host: str = "0.0.0.0", pool: Sequence[int] | None = None
) -> list[int]:
    """``count`` TCP ports free on ``host`` (default: every interface) now, none of them in ``handed_out`` (which
    is updated).

    They are drawn at random from below the kernel's ephemeral range (``pool``, default
    :func:`handed_out_pool`): a port of that range, handed out and released until the worker binds it, could be
    taken meanwhile by any ``bind(0)`` or outgoing connection on the host, which never use ports outside it.
    All sockets are held until every port is chosen, so one call never returns a port twice; a port another
    program binds between now and the worker's bind is not preventable here (the worker then fails, saying so).
    """
    pool = pool if pool is not None else handed_out_pool()
    ports: list[int] = []
    holders = []
    tries = 0
    try:
        while len(ports) < count:
            tries += 1
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            holders.append(sock)
            port = random.choice(pool) if pool and tries <= 50 * count else 0  # 0: the kernel's pick
            try:
                sock.bind((host, port))
            except OSError:
                continue  # taken: draw again
            port = sock.getsockname()[1]
            if port not in handed_out and port not in ports:
                ports.append(port)
    finally:
        for sock in holders:
            sock.close()
    handed_out.update(ports)
    return ports


def handed_out_pool() -> range:
    """Ports below the kernel's ephemeral range (``ip_local_port_range``), from :data:`LOWEST_PORT`; empty when
    that leaves too few (then the kernel picks, from its range)."""
    try:
        with open(EPHEMERAL_RANGE) as fh:
            low = int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return range(0)
    return range(LOWEST_PORT, low) if low - LOWEST_PORT >= _MIN_POOL else range(0)
