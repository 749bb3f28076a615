"""On a worker's host: readiness probes (TCP connect or HTTP GET) until a deadline."""

from __future__ import annotations

import http.client
import socket
import threading
import time
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
