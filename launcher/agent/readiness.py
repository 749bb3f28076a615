"""On a worker's host: free ports to hand out, and readiness probes (TCP connect or HTTP GET) until a deadline."""

from __future__ import annotations

import http.client
import random
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any


def probe_once(kind: str, host: str, port: int, path: str = "/health", timeout_s: float = 1.0) -> str | None:
    """None if the probe passes, else a short reason."""
    try:
        if kind == "tcp":
            with socket.create_connection((host, port), timeout=timeout_s):
                return None
        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
        try:
            conn.request("GET", path)
            status = conn.getresponse().status
        finally:
            conn.close()
        return None if status == 200 else f"GET {path} answered {status}"
    except OSError as exc:
        return f"{kind} {host}:{port}: {exc.strerror or exc}"
    except http.client.HTTPException as exc:
        return f"GET {path}: {exc!r}"


def wait_ready(spec: dict[str, Any], stop: threading.Event) -> str | None:
    """Probe until it passes (None), ``stop`` is set or ``spec['deadline_s']`` passes (the last reason)."""
    deadline = time.monotonic() + float(spec.get("deadline_s", 120.0))
    kind, port = spec["kind"], int(spec["port_number"])
    host, path = spec.get("probe_host", "127.0.0.1"), spec.get("path", "/health")
    reason = "never probed"
    while not stop.is_set():
        reason = probe_once(kind, host, port, path, timeout_s=min(1.0, max(0.1, deadline - time.monotonic())))
        if reason is None:
            return None
        if time.monotonic() >= deadline:
            break
        stop.wait(0.1)
    return f"not ready after {float(spec.get('deadline_s', 120.0)):g}s: {reason}"


EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST_PORT = 10000  # handed-out ports are drawn from here up to the kernel's ephemeral range
_MIN_POOL = 1000


def free_ports(count: int, handed_out: set[int], *, pool: Sequence[int] | None = None) -> list[int]:
    """``count`` TCP ports free on every interface now, none of them in ``handed_out`` (which is updated).

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
                sock.bind(("0.0.0.0", port))
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
