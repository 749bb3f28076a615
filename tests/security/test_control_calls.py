"""Control calls (prepare, construct, shutdown) run only with the spawner's proof: nothing from the wire runs code.

The attacks of the security review, against live actor processes on loopback: class bytes that run code when
unpickled, a module import, a second construction, a shutdown, all from a peer that can reach the socket but
did not spawn the worker.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from raw_client import RawClient

from runtime import ActorHandle, CallRejected, spawn
from runtime.core import control_auth
from runtime.core.call_ids import new_call_id
from runtime.internals import attach
from runtime.processes.process import READY_PREFIX, worker_command

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


class _TouchOnUnpickle:
    """Unpickling this creates a file: proof that the actor unpickled attacker bytes."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (Path.touch, (self.path,))


def _refused(raw: RawClient, method: str, *args: Any) -> str:
    """Send ``method`` without a proof; returns the refusal's message (asserts it was refused)."""
    call_id, frames = raw.submit_frames(method, *args)
    raw.send(frames)
    message = raw.recv()
    ok, error = raw.result(message)
    assert bytes(message.meta[0]) == call_id and not ok and error["code"] == "rejected", error
    return error["message"]


def test_no_peer_can_unpickle_import_construct_or_shut_down_a_constructed_actor(
    target: ActorHandle, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    evil = pickle.dumps(_TouchOnUnpickle(marker))
    raw = RawClient(target.endpoint)
    try:
        for method, args in [
            ("__prepare__", (evil, {})),
            ("__construct__", (evil, {}, {})),
            ("__prepare__", ("os:system", {})),
            ("__construct__", ("attack_actors:Target", {"label": "mine"}, {})),
            ("__shutdown__", ()),
        ]:
            assert "only the process that spawned this actor" in _refused(raw, method, *args)
        assert not marker.exists()
        assert target.hit(1).result(10) == 1  # still alive and still the same actor
        assert target.process_health().result(10)["name"] == "target"
        stats = target.method("__stats__")().result(10)
        assert stats["unauthorized_total"] == 5
    finally:
        raw.close()


def test_a_forged_or_replayed_proof_is_refused(target: ActorHandle) -> None:
    raw = RawClient(target.endpoint)
    try:
        raw.send(raw.pack_submit([new_call_id(), "__shutdown__", None, None, b"\x00" * 32, [], False]))
        ok, error = raw.result(raw.recv())
        assert not ok and "only the process that spawned" in error["message"]
        # A proof made with the right token for one request does not fit another call id.
        good = control_auth.proof(target.spawn_token, new_call_id(), "__shutdown__", b"\x00" * 16)
        raw.send(raw.pack_submit([new_call_id(), "__shutdown__", None, None, good, [], False]))
        ok, error = raw.result(raw.recv())
        assert not ok and "only the process that spawned" in error["message"]
        assert target.hit(2).result(10) == 2
    finally:
        raw.close()


def test_the_spawner_can_shut_down_but_never_construct_twice(no_leaks: None) -> None:
    handle = spawn("attack_actors:Target", name="owned")
    try:
        with pytest.raises(CallRejected, match="already constructed"):
            handle.method("__construct__")("attack_actors:Target", {}, {}).result(10)
        with pytest.raises(CallRejected, match="already constructed"):
            handle.method("__prepare__")("attack_actors:Target", {}).result(10)
        assert handle.method("__shutdown__")().result(10) is True
        assert handle.process.popen.wait(10) == 0
    finally:
        handle.kill()


def test_a_handle_from_elsewhere_cannot_kill(target: ActorHandle) -> None:
    stranger = ActorHandle(**target.to_state())
    assert stranger.spawn_token is None
    with pytest.raises(CallRejected, match="only by the process that spawned"):
        stranger.kill()
    with pytest.raises(CallRejected, match="control call that only the process which spawned"):
        stranger.method("__shutdown__")()
    assert target.hit(3).result(10) == 3


def test_an_empty_worker_is_constructed_only_by_its_spawner(no_leaks: None, tmp_path: Path) -> None:
    """Before construction, too: a peer racing the spawner to an empty worker can construct nothing."""
    ticket = control_auth.SpawnTicket.new()
    popen = subprocess.Popen(
        worker_command("tcp://127.0.0.1:0", metrics_port=None),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": f"{ROOT}:{Path(__file__).parent}", "PATH": "/usr/bin:/bin"},
    )
    try:
        popen.stdin.write(ticket.line())
        popen.stdin.close()
        line = popen.stdout.readline()
        assert line.startswith(READY_PREFIX), line
        endpoint = json.loads(line[len(READY_PREFIX) :])["endpoint"]
        marker = tmp_path / "pwned"
        raw = RawClient(endpoint)
        try:
            evil = pickle.dumps(_TouchOnUnpickle(marker))
            assert "only the process that spawned" in _refused(raw, "__construct__", evil, {}, {})
            assert "only the process that spawned" in _refused(raw, "__prepare__", "attack_actors:Target", {})
        finally:
            raw.close()
        assert not marker.exists()
        with pytest.raises(CallRejected, match="only the process that spawned"):
            attach(endpoint, "attack_actors:Target", ticket=control_auth.SpawnTicket.new(), deadline_s=10)
        handle = attach(endpoint, "attack_actors:Target", ticket=ticket, kwargs={"label": "real"}, deadline_s=10)
        assert handle.hit(4).result(10) == 4
        handle.kill()  # the attaching process holds the token: it may shut the worker down
        assert popen.wait(10) == 0
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.wait(10)


def test_a_worker_without_a_ticket_refuses_to_start() -> None:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "runtime.worker", "--bind", "tcp://127.0.0.1:0", "--no-metrics"],
        input="not a ticket\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    assert result.returncode == 2 and "did not start with a spawn ticket" in result.stderr
    assert READY_PREFIX not in result.stdout and time.monotonic() - started < 20
