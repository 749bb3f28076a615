"""Every actor process serves Prometheus /metrics: runtime series and the actor's own, scraped over HTTP."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest
from fault_helpers import HERE, http_get, read_line, stop_process
from prometheus_client.parser import text_string_to_metric_families

from runtime import RemoteError, metrics, spawn
from runtime.core import control_auth
from runtime.processes.process import READY_PREFIX

pytestmark = pytest.mark.processes


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample at ``/metrics`` on ``port``, by (name, sorted labels)."""
    text = http_get(f"http://127.0.0.1:{port}/metrics").decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    matches = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls)]
    assert matches, f"no sample {name}{labels} among {sorted({n for n, _ in samples})}"
    return sum(matches)


def test_runtime_and_user_metrics_are_served(no_leaks: None) -> None:
    actor = spawn("fault_actors:Tally", name="tally")
    try:
        assert actor.metrics_port and actor.process_health().result(10)["metrics_port"] == actor.metrics_port
        for key in range(10):
            actor.hit(key).result(10)
        with pytest.raises(RemoteError):
            actor.method("relay")(None, 1).result(10)  # raises inside the actor: outcome "error"
        busy = actor.sleep(1.5)
        time.sleep(0.3)
        samples = scrape(actor.metrics_port)
        tally = {"actor_class": "fault_actors:Tally"}
        assert value(samples, "miles_actor_calls_total", method="hit", outcome="ok", **tally) == 10
        assert value(samples, "miles_actor_calls_total", method="relay", outcome="error") == 1
        assert value(samples, "miles_actor_call_seconds_count", method="hit", **tally) == 10
        assert value(samples, "miles_actor_call_seconds_bucket", method="hit", le="+Inf") == 10
        assert value(samples, "miles_actor_calls_in_flight") >= 1
        assert value(samples, "miles_actor_calls_running", lane="default") == 1
        assert value(samples, "miles_actor_bytes_received_total") > 0
        assert value(samples, "miles_actor_bytes_sent_total") > 0
        assert value(samples, "miles_actor_call_store_records") >= 1
        assert value(samples, "miles_actor_call_store_bytes") > 0
        assert value(samples, "miles_actor_restarts") == 0
        assert value(samples, "miles_actor_info", actor="tally", actor_class="fault_actors:Tally") == 1
        assert value(samples, "process_resident_memory_bytes") > 0
        # the actor's own series, from runtime.metrics.counter/gauge/histogram
        assert value(samples, "tally_hits_total", parity="even") == 5
        assert value(samples, "tally_last_key") == 9
        assert value(samples, "tally_key_size_bucket", le="10.0") == 10
        assert busy.result(10) == 1.5
        after = scrape(actor.metrics_port)
        assert value(after, "miles_actor_calls_running", lane="default") == 0
        assert value(after, "miles_actor_calls_total", method="sleep", outcome="ok") == 1
    finally:
        actor.kill()


def test_metrics_can_be_turned_off(no_leaks: None) -> None:
    actor = spawn("fault_actors:Tally", metrics_port=None)
    try:
        assert actor.metrics_port is None
        assert actor.process_health().result(10)["metrics_port"] is None
        assert actor.hit(1).result(10) == 1
    finally:
        actor.kill()


def test_worker_reports_its_metrics_port_in_the_ready_line(no_leaks: None) -> None:
    """The contract launchers rely on: ``--metrics-port 0`` allocates a port and the ready line names it."""
    popen = subprocess.Popen(
        [sys.executable, "-m", "runtime.worker", "--bind", "tcp://127.0.0.1:0", "--metrics-port", "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=HERE.parent.parent,
    )
    popen.stdin.write(control_auth.SpawnTicket.new().line())
    popen.stdin.close()
    try:
        ready = read_line(popen, READY_PREFIX, 30)
        assert isinstance(ready["metrics_port"], int) and ready["metrics_port"] > 0
        samples = scrape(ready["metrics_port"])  # an empty worker serves too (no actor constructed yet)
        assert value(samples, "miles_actor_info", actor_class="") == 1
    finally:
        stop_process(popen)
    bad = subprocess.run(
        [sys.executable, "-m", "runtime.worker", "--metrics-port", "70000"],
        capture_output=True,
        text=True,
        cwd=HERE.parent.parent,
        timeout=30,
    )
    assert bad.returncode != 0 and "--metrics-port must be in 0..65535" in bad.stderr


def test_user_metric_api_refuses_conflicts_and_reserved_names() -> None:
    hits = metrics.counter("fault_test_hits_total", "hits", labels=["kind"])
    assert metrics.counter("fault_test_hits_total", "hits", labels=["kind"]) is hits  # asking again is fine
    with pytest.raises(ValueError, match="already exists as a Counter"):
        metrics.gauge("fault_test_hits_total", "hits")
    with pytest.raises(ValueError, match="reserved for the runtime"):
        metrics.counter("miles_actor_mine", "no")
    with pytest.raises(TypeError, match="list of names"):
        metrics.gauge("fault_test_level", "x", labels="kind")  # type: ignore[arg-type]
