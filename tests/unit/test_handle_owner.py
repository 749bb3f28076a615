"""The handle gets what stops its actor when it is made (runtime.caller.handle.ActorOwner): kill() stops it through
its owner, kill(no_restart=False) asks for a restart only of an owner that restarts, and the owner never travels."""

from __future__ import annotations

import pickle

import pytest

from runtime import ActorHandle


class Owner:
    """An owner that records what it was asked (a Supervisor restarts; a placed actor's process does not)."""

    def __init__(self, restarts_actor: bool) -> None:
        self.restarts_actor = restarts_actor
        self.process = object()
        self.asked: list[str] = []

    def stop(self) -> None:
        self.asked.append("stop")

    def kill_for_restart(self) -> None:
        self.asked.append("kill_for_restart")


def handle(owner: Owner | None, boot_id: str | None = "b1") -> ActorHandle:
    return ActorHandle(endpoint="tcp://127.0.0.1:9", name="a", class_path="m:A", boot_id=boot_id, host="h", pid=1,
                       owner=owner, curve_dir=None)  # fmt: skip


def test_kill_stops_the_actor_through_its_owner_and_tells_who_asked_once() -> None:
    owner = Owner(restarts_actor=True)
    actor = handle(owner)
    killed: list[ActorHandle] = []
    actor.when_killed(killed.append)
    actor.when_killed(killed.append)  # the same callback twice is kept once (naming registers on every claim)
    assert actor.owner is owner and actor.process is owner.process and actor.follows_restarts
    actor.kill(no_restart=False)
    assert owner.asked == ["kill_for_restart"] and killed == []  # a crash as the policy sees it: not a kill
    actor.kill()
    assert owner.asked == ["kill_for_restart", "stop"] and killed == [actor]


def test_an_owner_that_does_not_restart_refuses_a_restart_kill_and_pins_the_handle() -> None:
    owner = Owner(restarts_actor=False)  # a placed actor's process
    actor = handle(owner)
    assert not actor.follows_restarts  # pinned to its incarnation: a placed actor is not restarted
    with pytest.raises(ValueError, match=r"kill\(no_restart=False\) needs the handle spawn\(\) returned"):
        actor.kill(no_restart=False)
    assert owner.asked == []


def test_a_copy_has_no_owner_and_cannot_kill_the_actor() -> None:
    actor = handle(Owner(restarts_actor=True))
    copy = pickle.loads(pickle.dumps(actor))
    assert copy.owner is None and copy.process is None and copy.spawn_token is None
    assert not copy.follows_restarts  # pinned: only the spawner's handle follows restarts


def test_now_at_points_the_handle_at_a_new_incarnation() -> None:
    actor = handle(None, boot_id=None)
    assert actor.follows_restarts  # it names no incarnation yet
    actor.now_at({"boot_id": "b2", "pid": 7, "host": "h2", "metrics_port": 9100}, spawn_token=b"t")
    assert (actor.boot_id, actor.pid, actor.host, actor.metrics_port, actor.spawn_token) == ("b2", 7, "h2", 9100, b"t")
    actor.now_at({"boot_id": "b3", "pid": 8, "host": "h2"}, spawn_token=None)
    assert (actor.boot_id, actor.metrics_port, actor.spawn_token) == ("b3", None, b"t")  # the token stays
    assert not actor.follows_restarts
