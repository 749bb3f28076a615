"""Job entrypoints of the cluster inference tests (launcher-placed engines behind the controller's router)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

import requests

BODY = {"text": "The answer is", "sampling_params": {"temperature": 0, "max_new_tokens": 4, "ignore_eos": True}}


class Traffic:
    """Requests through the router, one after another on a thread, each recorded as (time, status or error)."""

    def __init__(self, router_url: str) -> None:
        self.url = router_url + "/generate"
        self.log: list[tuple[float, int | str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="traffic", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                status: int | str = requests.post(self.url, json=BODY, timeout=30).status_code
            except requests.RequestException as exc:
                status = type(exc).__name__
            self.log.append((time.monotonic(), status))

    def ok_since(self, since: float) -> int:
        return sum(1 for at, status in list(self.log) if at >= since and status == 200)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def wait(what: str, probe: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := probe()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout_s} s")
        time.sleep(0.1)
    return found


def engine_failover(ctx: Any) -> int:
    """kill -9 the engine on h2 while requests flow through the router; print what the launcher and the controller
    saw before and after (``FAILOVER {json}``)."""
    (controller,) = ctx.handles("inference")
    controller.start().result(timeout=240)
    router = controller.router_url().result(timeout=10)
    api = ctx.provider_api
    before = api.call_sync("cells", "engines")
    victim = next(cell for cell in before if cell["host"] == "h2")
    traffic = Traffic(router)
    try:
        started = time.monotonic()
        wait("requests served before the kill", lambda: traffic.ok_since(started) >= 3, 60)
        os.kill(victim["pid"], signal.SIGKILL)
        killed = time.monotonic()

        def replaced() -> dict[str, Any] | None:
            cell = controller.cells().result(timeout=10)[victim["index"]]
            return cell if cell["state"] == "serving" and cell["pid"] != victim["pid"] else None

        cell = wait("the engine replaced", replaced, 120)
        back = time.monotonic()
        wait("requests served after the replacement", lambda: traffic.ok_since(back) >= 3, 60)
    finally:
        traffic.stop()
    workers = requests.get(router + "/workers", timeout=10).json()["workers"]
    report = {
        "before": before,
        "victim": victim,
        "after": api.call_sync("cells", "engines"),
        "controller_cell": cell,
        "router_workers": sorted(w["url"] for w in workers),
        "ok_during": traffic.ok_since(killed) - traffic.ok_since(back),
        "failed_during": [s for at, s in traffic.log if killed <= at < back and s != 200],
        "failed_after": [s for at, s in traffic.log if at >= back and s != 200],
        "deaths": api.call_sync("deaths", 0),
    }
    print("FAILOVER " + json.dumps(report), flush=True)
    controller.shutdown().result(timeout=60)
    return 0
