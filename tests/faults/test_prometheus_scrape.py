"""A real Prometheus server finds an actor through the HTTP service discovery endpoint and scrapes it: runtime
and user metrics arrive, with the discovery labels; a removed target disappears."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_server import Prometheus

from launcher.launch.service_discovery import ServiceDiscovery
from runtime import spawn

pytestmark = pytest.mark.processes


def _eventually(what: str, probe: Callable[[], Any], timeout_s: float) -> Any:
    """``probe()``'s first truthy value, polled until ``timeout_s``; fails the test naming ``what``."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.5)
    pytest.fail(f"{what} within {timeout_s} s (last answer: {last!r})")


def test_prometheus_scrapes_an_actor_found_by_http_sd(no_leaks: None, prometheus: Callable[[str], Prometheus]) -> None:
    actor = spawn("fault_actors:Tally", name="scraped")
    try:
        with ServiceDiscovery() as sd:
            target = f"127.0.0.1:{actor.metrics_port}"
            sd.add(target, {"pool": "rollout", "cell": "rollout-0", "worker": "scraped", "host": socket.gethostname()})
            server = prometheus(sd.url)
            for key in range(7):
                actor.hit(key).result(10)

            def calls() -> list[dict[str, Any]]:
                found = server.query('miles_actor_calls_total{method="hit",outcome="ok"}')
                return [r for r in found if float(r["value"][1]) == 7]

            (series,) = _eventually("Prometheus had no miles_actor_calls_total of 7 hits", calls, 60)
            labels = series["metric"]
            assert labels["actor_class"] == "fault_actors:Tally" and labels["job"] == "miles"
            assert labels["instance"] == target
            assert (labels["pool"], labels["cell"], labels["worker"]) == ("rollout", "rollout-0", "scraped")
            user = _eventually("no user metric", lambda: server.query('tally_hits_total{parity="odd"}'), 30)
            assert float(user[0]["value"][1]) == 3
            latency = server.query('miles_actor_call_seconds_count{method="hit"}')
            assert latency and float(latency[0]["value"][1]) == 7

            sd.remove(target)
            _eventually(
                "the removed target was still scraped",
                lambda: not server.api("targets", state="active")["activeTargets"],
                30,
            )
    finally:
        actor.kill()
