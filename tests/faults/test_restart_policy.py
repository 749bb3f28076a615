"""``spawn(..., max_restarts=N)``: same endpoint, constructor re-run with the same kwargs, a handle that keeps
working, ActorRestarted for calls in flight, ActorDied naming the exit codes once the budget is spent."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from fault_helpers import http_get

from runtime import ActorDied, ActorRestarted, spawn

pytestmark = pytest.mark.processes


def _constructions(log_path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log_path.read_text().splitlines()]


def _wait_for_pid_change(handle: object, old_pid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if handle.pid != old_pid:  # type: ignore[attr-defined]
            return
        time.sleep(0.05)
    pytest.fail(f"the actor was not restarted within {timeout_s} s")


def test_restart_reruns_the_constructor_on_the_same_endpoint(no_leaks: None, tmp_path: Path) -> None:
    log_path = tmp_path / "constructions.jsonl"
    actor = spawn(
        "fault_actors:Restartable", kwargs={"log_path": str(log_path), "tag": "blue"}, name="phoenix", max_restarts=2
    )
    try:
        endpoint, metrics_port, first_pid = actor.endpoint, actor.metrics_port, actor.pid
        assert actor.add(5).result(10) == 5
        in_flight = actor.sleep(30.0)
        time.sleep(0.3)
        os.kill(first_pid, signal.SIGKILL)
        with pytest.raises(ActorRestarted, match=r"exited with code -9; calls in flight were lost"):
            in_flight.result(timeout=5)
        during = actor.whoami()  # made while the restart runs: waits for the new incarnation
        assert during.result(timeout=30) == "blue"
        assert actor.method("get_pid")().result(10) == actor.pid != first_pid
        assert actor.add(1).result(10) == 1  # a fresh instance: state is not carried over
        assert actor.endpoint == endpoint and actor.metrics_port == metrics_port
        built = _constructions(log_path)
        assert [entry["tag"] for entry in built] == ["blue", "blue"]
        assert built[1]["pid"] == actor.pid
        health = actor.process_health().result(10)
        assert health["restarts"] == 1 and health["name"] == "phoenix"
        scraped = http_get(f"http://127.0.0.1:{metrics_port}/metrics").decode()
        assert "miles_actor_restarts 1.0" in scraped
    finally:
        actor.kill()


def test_the_budget_is_spent_then_actor_died_names_the_exit_codes(no_leaks: None, tmp_path: Path) -> None:
    log_path = tmp_path / "constructions.jsonl"
    actor = spawn("fault_actors:Restartable", kwargs={"log_path": str(log_path), "tag": "x"}, max_restarts=2)
    try:
        for _ in range(2):
            old = actor.pid
            os.kill(old, signal.SIGKILL)
            _wait_for_pid_change(actor, old, 30)
            assert actor.add(1).result(30) == 1
        with pytest.raises(ActorDied):  # the third death, by the actor's own hand: final
            actor.exit_now(3).result(10)
        with pytest.raises(ActorDied, match=r"after 2 restart\(s\) \(max_restarts=2\); exit codes: -9, -9, 3"):
            actor.add(1).result(5)
        assert len(_constructions(log_path)) == 3
    finally:
        actor.kill()


def test_no_restart_after_kill_or_a_clean_exit(no_leaks: None, tmp_path: Path) -> None:
    log_path = tmp_path / "constructions.jsonl"
    kwargs = {"log_path": str(log_path), "tag": "x"}
    killed = spawn("fault_actors:Restartable", kwargs=kwargs, max_restarts=5)
    killed.kill()
    with pytest.raises(ActorDied):
        killed.add(1).result(5)
    clean = spawn("fault_actors:Restartable", kwargs=kwargs, max_restarts=5)
    try:
        assert clean.method("__shutdown__")().result(10) is True
        with pytest.raises(ActorDied, match="exited with code 0"):
            for _ in range(50):  # until the exit is seen
                clean.add(1).result(5)
                time.sleep(0.1)
        time.sleep(0.5)
        assert len(_constructions(log_path)) == 2  # one each, no restart
    finally:
        clean.kill()


def test_a_restart_whose_constructor_fails_counts_against_the_budget(no_leaks: None, tmp_path: Path) -> None:
    log_path = tmp_path / "constructions.jsonl"
    actor = spawn(
        "fault_actors:Restartable",
        kwargs={"log_path": str(log_path), "tag": "x", "fail_after": 1},
        max_restarts=2,
    )
    try:
        os.kill(actor.pid, signal.SIGKILL)
        time.sleep(0.2)  # the exit is seen: calls from now on wait for the restarts, not die in flight
        with pytest.raises(ActorDied, match=r"restart 2 of actor .* failed: .*construction 2 refused.*gave up"):
            actor.add(1).result(60)
        assert len(_constructions(log_path)) == 1
    finally:
        actor.kill()
