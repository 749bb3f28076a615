"""Prometheus service discovery: targets appear and disappear in the HTTP SD endpoint and the file_sd JSON."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
from pathlib import Path

import pytest
from fault_helpers import http_get

from launcher.launch.service_discovery import ServiceDiscovery


def _served(sd: ServiceDiscovery) -> dict[str, dict[str, str]]:
    groups = json.loads(http_get(sd.url))
    return {target: group["labels"] for group in groups for target in group["targets"]}


def _filed(path: Path) -> dict[str, dict[str, str]]:
    return {target: group["labels"] for group in json.loads(path.read_text()) for target in group["targets"]}


def test_targets_appear_and_disappear(tmp_path: Path) -> None:
    file_path = tmp_path / "sd" / "miles-targets.json"
    with ServiceDiscovery(file_path=file_path) as sd:
        assert _served(sd) == {} and _filed(file_path) == {}
        labels = {"pool": "rollout", "cell": "rollout-0", "worker": "rollout-0-0", "host": "node1"}
        sd.add("127.0.0.1:9101", labels)
        sd.add("[::1]:9102", {**labels, "worker": "rollout-0-1"})
        assert _served(sd) == _filed(file_path) == sd.targets()
        assert _served(sd)["127.0.0.1:9101"] == labels
        assert sd.remove("127.0.0.1:9101") is True and sd.remove("127.0.0.1:9101") is False
        assert set(_served(sd)) == set(_filed(file_path)) == {"[::1]:9102"}
        sd.set_targets({"10.0.0.5:9100": {"pool": "train"}})
        assert _served(sd) == _filed(file_path) == {"10.0.0.5:9100": {"pool": "train"}}
        with pytest.raises(urllib.error.HTTPError, match="404"):
            http_get(sd.url.replace("/targets", "/nothing"))
        assert not list(file_path.parent.glob(".*.tmp")), "a temporary file was left behind"
    assert _filed(file_path) == {"10.0.0.5:9100": {"pool": "train"}}  # the file outlives the server


@pytest.mark.parametrize(
    ("address", "labels", "error", "match"),
    [
        ("localhost", {}, ValueError, "must be 'host:port'"),
        ("host:0", {}, ValueError, "port 1..65535"),
        ("host:99999", {}, ValueError, "port 1..65535"),
        ("http://host:9100", {}, ValueError, "must be 'host:port'"),
        ("host:9100", {"__meta": "x"}, ValueError, "not starting with '__'"),
        ("host:9100", {"bad-name": "x"}, ValueError, "not a Prometheus label name"),
        ("host:9100", {"pool": 3}, TypeError, "must be a str"),
    ],
)
def test_bad_targets_are_refused(address: str, labels: dict, error: type[Exception], match: str) -> None:
    with ServiceDiscovery() as sd:
        with pytest.raises(error, match=match):
            sd.add(address, labels)
        with pytest.raises(error, match=match):
            sd.set_targets({address: labels})
        assert sd.targets() == {}


def test_concurrent_changes_and_reads_stay_consistent(tmp_path: Path) -> None:
    file_path = tmp_path / "targets.json"
    with ServiceDiscovery(file_path=file_path) as sd:
        failures: list[BaseException] = []
        stop = threading.Event()

        def churn(worker: int) -> None:
            try:
                for i in range(30):  # each change rewrites the file: 6 x 30 is plenty of overlap with the readers
                    address = f"10.0.{worker}.{i % 10 + 1}:9100"
                    sd.add(address, {"worker": str(worker), "round": str(i)})
                    if i % 3 == 0:
                        sd.remove(address)
            except BaseException as exc:
                failures.append(exc)

        def read() -> None:
            try:
                while not stop.is_set():
                    json.loads(http_get(sd.url))  # never half a document
                    json.loads(file_path.read_text())
            except BaseException as exc:
                failures.append(exc)

        readers = [threading.Thread(target=read) for _ in range(2)]
        writers = [threading.Thread(target=churn, args=(w,)) for w in range(6)]
        for thread in readers + writers:
            thread.start()
        for thread in writers:
            thread.join(60)
        stop.set()
        for thread in readers:
            thread.join(10)
        assert not failures, failures[:3]
        assert not any(thread.is_alive() for thread in readers + writers)
        assert _served(sd) == _filed(file_path) == sd.targets()
        assert sd.requests > 0


def test_close_returns_within_its_deadline() -> None:
    sd = ServiceDiscovery()
    started = time.monotonic()
    sd.close(timeout_s=5.0)
    assert time.monotonic() - started < 5.0
    with pytest.raises(OSError):
        http_get(sd.url, timeout_s=2)
