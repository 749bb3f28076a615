"""Admission (runtime.actor.admission): which new calls an actor server takes, and what each refusal says. Pure."""

from __future__ import annotations

import os

import pytest

from runtime.actor import admission
from runtime.actor.call_store import CallRecord, CallStore, StoreLimits
from runtime.actor.server_phase import ServerPhase
from runtime.core import control_auth
from runtime.core.call_ids import new_call_id
from transport.messages import Submit

A, B = b"peer-a", b"peer-b"


def _store(**limits: int) -> CallStore:
    return CallStore(limits=StoreLimits(**limits))


def _hold(store: CallStore, peer: bytes, nbytes: int = 0) -> None:
    store.add(CallRecord(call_id=new_call_id(), fingerprint=b"f", method="m", peer=peer), nbytes)


def test_a_store_with_room_takes_the_call() -> None:
    store = _store(max_calls=4, max_calls_per_peer=2, memory_budget_bytes=100, memory_budget_per_peer_bytes=60)
    _hold(store, A, 10)
    assert admission.capacity_problem(store, 50, A) is None  # 60 bytes for A: at its budget, not over


def test_a_full_store_refuses_calls_but_keeps_a_reserve_for_control_calls() -> None:
    store = _store(max_calls=2, max_calls_per_peer=2, control_reserve_calls=1)
    _hold(store, A)
    _hold(store, B)
    problem = admission.capacity_problem(store, 0, b"peer-c")
    assert problem == "2 calls are unacknowledged or running (limit max_calls=2); wait for results or raise the limit"
    assert admission.capacity_problem(store, 0, b"peer-c", control=True) is None  # health checks still answered
    _hold(store, A)
    assert admission.capacity_problem(store, 0, b"peer-c", control=True) is not None  # the reserve is used up


def test_one_caller_at_its_call_budget_does_not_lock_out_the_others() -> None:
    store = _store(max_calls=10, max_calls_per_peer=2)
    _hold(store, A)
    _hold(store, A)
    problem = admission.capacity_problem(store, 0, A)
    assert problem is not None and "this caller has 2 calls" in problem and "max_calls_per_peer=2" in problem
    assert admission.capacity_problem(store, 0, B) is None
    assert admission.capacity_problem(store, 0, A, control=True) is None  # control calls skip the per-peer budget


def test_bytes_are_held_to_the_store_budget_and_to_each_callers_share() -> None:
    store = _store(memory_budget_bytes=100, memory_budget_per_peer_bytes=60)
    _hold(store, A, 50)
    _hold(store, B, 30)
    problem = admission.capacity_problem(store, 21, b"peer-c")
    assert problem is not None and "holds 80 bytes and this call brings 21" in problem
    assert "memory_budget_bytes=100" in problem
    problem = admission.capacity_problem(store, 11, A)
    assert problem is not None and "this caller's calls hold 50 bytes" in problem
    assert "memory_budget_per_peer_bytes=60" in problem
    assert admission.capacity_problem(store, 11, B) is None


def _control(method: str, token: bytes, fingerprint: bytes = b"fp") -> Submit:
    call_id = new_call_id()
    return Submit(call_id, method, None, None, control_auth.proof(token, call_id, method, fingerprint), [], False)


def test_a_control_call_needs_the_spawners_proof_for_this_very_request() -> None:
    token = os.urandom(control_auth.TOKEN_BYTES)
    head = _control("__construct__", token)
    assert admission.control_problem(token, head, b"fp", "a", ServerPhase.LISTENING) is None
    for spawn_token, fingerprint in ((None, b"fp"), (os.urandom(32), b"fp"), (token, b"another request")):
        problem = admission.control_problem(spawn_token, head, fingerprint, "a", ServerPhase.LISTENING)
        assert problem is not None and problem.startswith("__construct__ is a control call")
    forged = head._replace(proof=None)
    assert admission.control_problem(token, forged, b"fp", "a", ServerPhase.LISTENING) is not None


@pytest.mark.parametrize("phase", [ServerPhase.CONSTRUCTING, ServerPhase.SERVING, ServerPhase.LEAVING])
def test_only_shutdown_may_follow_construction(phase: ServerPhase) -> None:
    token = os.urandom(control_auth.TOKEN_BYTES)
    problem = admission.control_problem(token, _control("__construct__", token), b"fp", "trainer", phase)
    assert problem == "actor 'trainer' is already constructed; spawn a new process for another actor"
    assert admission.control_problem(token, _control("__shutdown__", token), b"fp", "trainer", phase) is None


def test_a_call_for_an_earlier_incarnation_says_it_was_not_run() -> None:
    message = admission.restarted("boot-1", "boot-2")
    assert "meant for incarnation boot-1" in message and "this process is boot-2" in message
    assert message.endswith("the call was not run")
