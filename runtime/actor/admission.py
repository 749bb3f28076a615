"""Admission: whether an actor server takes a new call, and what its refusal says.

Each check returns None, or a message that says what happened and what to do; call routing
(:mod:`runtime.actor.call_routing`) asks them in order (:meth:`runtime.actor.call_routing.CallRouter.on_submit`).
"""

from __future__ import annotations

from runtime.actor.call_store import CallStore
from runtime.actor.server_phase import ServerPhase
from runtime.core import control_auth
from transport.messages import Submit


def restarted(expected_boot: str, boot_id: str) -> str:
    """The refusal of a call meant for incarnation ``expected_boot`` by a process that is ``boot_id``."""
    return (
        f"the call was meant for incarnation {expected_boot} but this process is {boot_id}; "
        "the actor restarted, so the call was not run"
    )


def control_problem(
    spawn_token: bytes | None, head: Submit, fingerprint: bytes, actor: str, phase: ServerPhase
) -> str | None:
    """Why a control call (construct, shutdown) may not run, or None. ``spawn_token`` None: none may."""
    if not control_auth.verify(spawn_token, head.proof, head.call_id, head.method, fingerprint):
        return (
            f"{head.method} is a control call: only the process that spawned this actor may make it "
            "(its request carries a proof made with the worker's spawn token)"
        )
    if head.method != "__shutdown__" and phase is not ServerPhase.LISTENING:
        return f"actor {actor!r} is already constructed; spawn a new process for another actor"
    return None


def capacity_problem(store: CallStore, incoming_bytes: int, peer: bytes, *, control: bool = False) -> str | None:
    """Why a new call of ``incoming_bytes`` from ``peer`` cannot be held by ``store`` now, or None. ``control``
    calls may also use the reserve above ``max_calls`` and are not held to the per-peer call budget.

    The budgets count calls and bytes held by the store (arguments of queued calls and results), in all and per
    caller, so one caller that never acknowledges cannot lock the others out; the reserve is for control-plane
    calls (health, stats, object fetches), so a full store never silences health checks.
    """
    limits = store.limits
    max_calls = limits.max_calls + (limits.control_reserve_calls if control else 0)
    if len(store.records) >= max_calls:
        return (
            f"{len(store.records)} calls are unacknowledged or running (limit max_calls="
            f"{limits.max_calls}); wait for results or raise the limit"
        )
    if not control and store.peer_calls[peer] >= limits.max_calls_per_peer:
        return (
            f"this caller has {store.peer_calls[peer]} calls unacknowledged or running (limit "
            f"max_calls_per_peer={limits.max_calls_per_peer}); wait for results or raise the limit"
        )
    if store.nbytes + incoming_bytes > limits.memory_budget_bytes:
        return (
            f"over capacity: the call store holds {store.nbytes} bytes and this call brings {incoming_bytes}, "
            f"over memory_budget_bytes={limits.memory_budget_bytes}; fetch and acknowledge results, "
            "free object refs, or raise the budget"
        )
    if store.peer_bytes[peer] + incoming_bytes > limits.memory_budget_per_peer_bytes:
        return (
            f"over capacity: this caller's calls hold {store.peer_bytes[peer]} bytes and this one brings "
            f"{incoming_bytes}, over memory_budget_per_peer_bytes={limits.memory_budget_per_peer_bytes}; "
            "fetch and acknowledge results, or raise the budget"
        )
    return None
