"""Handles stay honest across processes: a handle held by a process other than the spawner is pinned to the
incarnation it names; after the actor restarts (``max_restarts``), a call through it is refused with
``ActorRestarted`` and never runs, until its holder moves it on (``follow_restart``). The spawner's own handle
follows restarts, as documented in runtime.processes.supervisor.

Peer read: radixark/miles, miles/ray/train/cell.py (31f1ca96). A RayTrainCell's actors are Ray actors without
``max_restarts``, so each handle names one incarnation: a failed call marks the cell errored and stops it
(``_execute_raw`` -> ``_mark_as_errored``, ``_stop_and_confirm_dead``), and new handles exist only when the cell is
started again (``allocate_for_pending``, from ``start_cell``): a handle never silently reaches a replacement and
holders move on only when asked. Here the handle a second process holds behaves the same across a restart.

Real processes; the kills are real SIGKILLs. The holder is stopped (SIGSTOP) while the actor dies and comes back,
as a holder on a far host that hears of the restart after it happened: then it sees the new incarnation answer
(never the old one's death first), so the outcome does not depend on which process the scheduler runs first.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from raw_client import RawClient

from runtime import ActorDied, ActorHandle, ActorRestarted, DeadlineExceeded, spawn
from runtime.core.call_ids import new_call_id
from runtime.core.outcome import arguments_bind
from transport.codec import encode
from transport.messages import Submit

pytestmark = pytest.mark.processes


def _restarted(actor: ActorHandle, old_pid: int, within_s: float = 30.0) -> None:
    """Wait until the spawner's handle calls a new incarnation (its calls wait for it: runtime.processes.supervisor)."""
    deadline = time.monotonic() + within_s
    while actor.pid == old_pid:
        assert time.monotonic() < deadline, f"the actor was not restarted within {within_s} s"
        time.sleep(0.05)
    assert actor.whoami().result(within_s) == "pinned"


@contextmanager
def _stopped(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _restartable(tmp_path: Path) -> ActorHandle:
    log_path = tmp_path / "constructions.jsonl"
    return spawn("fault_actors:Restartable", kwargs={"log_path": str(log_path), "tag": "pinned"}, max_restarts=1)


def _wait_seen(keeper: ActorHandle, boot_id: str, within_s: float = 10.0) -> None:
    """Wait until the keeper's connection heard from incarnation ``boot_id``."""
    deadline = time.monotonic() + within_s
    while keeper.seen_boot().result(10) != boot_id:
        assert time.monotonic() < deadline, f"the keeper did not hear from incarnation {boot_id} in {within_s} s"
        time.sleep(0.05)


def test_a_handle_in_another_process_is_refused_after_a_restart_until_moved_on(no_leaks: None, tmp_path: Path) -> None:
    actor = _restartable(tmp_path)
    keeper = spawn("fault_actors:Keeper")
    try:
        first_boot, first_pid = actor.boot_id, actor.pid
        assert keeper.keep(actor).result(10) == first_boot  # the handle it got names this incarnation
        assert keeper.add(1).result(10)["value"] == 1  # it reached it
        with _stopped(keeper.pid):
            os.kill(first_pid, signal.SIGKILL)
            _restarted(actor, first_pid)
        assert actor.boot_id != first_boot
        refused = keeper.add(10).result(10)
        assert refused["value"] is None and refused["pinned"] == first_boot
        assert refused["error"].startswith("ActorRestarted: ")
        # Refused here if its connection heard the new incarnation first, else by the actor (the SUBMIT names it),
        # or failed in flight when the new incarnation's answer to the connection's probe came first.
        assert any(
            why in refused["error"]
            for why in (
                f"pinned to incarnation {first_boot}",
                f"sent to incarnation {first_boot}",
                f"the actor restarted (boot id {first_boot} → {actor.boot_id})",
            )
        )
        assert "handle.follow_restart()" in refused["error"]  # says how to move on
        _wait_seen(keeper, actor.boot_id)
        again = keeper.add(100).result(10)  # it moves on only when asked: refused, not sent, every time
        assert again["error"].startswith("ActorRestarted: ") and "the call was not sent" in again["error"]
        assert actor.add(0).result(10) == 0  # neither call ran on the new incarnation (a fresh instance: total 0)
        assert keeper.follow().result(30) == actor.boot_id  # moved on when asked
        assert keeper.add(5).result(10) == {"value": 5, "error": None, "pinned": actor.boot_id}
        assert actor.add(0).result(10) == 5  # that one ran there
    finally:
        keeper.kill()
        actor.kill()


def test_the_spawners_handle_follows_while_a_pinned_copy_beside_it_is_refused(no_leaks: None, tmp_path: Path) -> None:
    actor = _restartable(tmp_path)
    try:
        copy = ActorHandle(**actor.to_state())  # as a handle sent back to the spawner: pinned, same connection
        assert copy.connection is actor.connection and copy.add(1).result(10) == 1
        assert not copy.follows_restarts and actor.follows_restarts
        first_boot, first_pid = actor.boot_id, actor.pid
        os.kill(first_pid, signal.SIGKILL)
        _restarted(actor, first_pid)  # the spawner's handle waited for the new incarnation and calls it
        with pytest.raises(ActorRestarted, match=f"pinned to incarnation {first_boot}, which is gone"):
            copy.add(10).result(10)
        assert actor.add(0).result(10) == 0  # the refused call did not run
        assert copy.follow_restart() is copy and copy.boot_id == actor.boot_id and copy.pid == actor.pid
        assert copy.add(2).result(10) == 2 and actor.add(0).result(10) == 2
    finally:
        actor.kill()


def test_follow_restart_never_adopts_another_actor_and_says_when_none_answers(no_leaks: None) -> None:
    actor = spawn("fault_actors:Restartable", kwargs={"log_path": os.devnull, "tag": "x"})
    try:
        other: dict[str, Any] = {**actor.to_state(), "name": "ghost"}  # the same address, another actor's name
        with pytest.raises(ActorDied, match=r"actor 'ghost' is gone: actor '.*' serves at tcp://"):
            ActorHandle(**other).follow_restart()
        gone = ActorHandle(**actor.to_state())
    finally:
        actor.kill()
    with pytest.raises(DeadlineExceeded, match=r"no incarnation of it answered constructed at .* within 1.5 s"):
        gone.follow_restart(deadline_s=1.5)  # nothing listens there any more


def test_the_actor_refuses_a_call_pinned_to_another_incarnation_before_running_it(no_leaks: None) -> None:
    """The server side of the pin (runtime.actor.call_routing ``on_submit``): whatever the caller's process knows."""
    actor = spawn("fault_actors:Restartable", kwargs={"log_path": os.devnull, "tag": "x"})
    raw = RawClient(actor.endpoint)
    try:
        replies = {}
        for pin in ("0123456789abcdef", actor.boot_id):  # an incarnation that is gone, then the live one
            call_id = new_call_id()
            payload = encode([[7], {}], bind=arguments_bind(call_id))
            raw.send(Submit(call_id, "add", None, pin, None, [], False).pack(payload))
            reply = raw.recv()
            assert reply.meta[2] == actor.boot_id  # every reply names the incarnation that sent it
            replies[pin] = raw.result(reply)
        ok, state = replies["0123456789abcdef"]
        assert not ok and state["code"] == "restarted"
        assert "meant for incarnation 0123456789abcdef" in state["message"] and "not run" in state["message"]
        assert replies[actor.boot_id] == (True, 7)  # only the call pinned to it ran
        assert actor.add(0).result(10) == 7
    finally:
        raw.close()
        actor.kill()
