"""kill -9 of actors while calls run: callers get ActorDied quickly, nothing hangs, survivors keep serving."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from runtime import ActorDied, ActorGroup, spawn, spawn_many
from transport import shared_memory

pytestmark = pytest.mark.processes


def test_kill_9_of_two_of_three_actors_during_calls(no_leaks: None) -> None:
    actors = spawn_many("fault_actors:Tally", 3, name_prefix="victim")
    try:
        slow = {actor.actor_name: actor.sleep(30.0) for actor in actors[:2]}  # the victims are busy
        quick = [actor.hit(key) for key in range(200) for actor in actors]
        time.sleep(0.3)
        killed_at = time.monotonic()
        for actor in actors[:2]:
            os.kill(actor.pid, signal.SIGKILL)
        for actor in actors[:2]:
            with pytest.raises(ActorDied, match=rf"actor process {actor.actor_name} .* exited with code -9"):
                slow[actor.actor_name].result(timeout=5)
        assert time.monotonic() - killed_at < 5.0
        for call in quick:  # every call has an outcome: a result, or ActorDied for the dead actors
            try:
                call.result(timeout=10)
            except ActorDied:
                pass
        for actor in actors[:2]:
            with pytest.raises(ActorDied):
                actor.hit(1).result(timeout=2)  # later calls fail at once
        survivor = actors[2]
        assert survivor.hit(10_000).result(timeout=10) == 10_000
        assert survivor.counts().result(10)[10_000] == 1
    finally:
        ActorGroup(actors).kill()


def test_kill_9_of_a_caller_leaves_the_callee_serving(no_leaks: None) -> None:
    callee = spawn("fault_actors:Tally", name="callee")
    caller = spawn("fault_actors:Tally", name="caller")
    try:
        relayed = [caller.relay(callee, key) for key in range(20)]
        assert [call.result(timeout=20) for call in relayed] == list(range(20))
        busy = caller.sleep(30.0)
        os.kill(caller.pid, signal.SIGKILL)
        with pytest.raises(ActorDied):
            busy.result(timeout=5)
        assert callee.hit(99).result(timeout=10) == 99
        runs = callee.counts().result(10)
        assert all(runs[key] == 1 for key in range(20)) and runs[99] == 1
    finally:
        caller.kill()
        callee.kill()


def test_kill_9_with_large_arguments_queued_leaves_no_shared_memory(no_leaks: None) -> None:
    actor = spawn("fault_actors:Tally")
    pid = actor.pid
    mine = f"miles-{os.getpid()}-*"
    try:
        blocker = actor.sleep(30.0)
        queued = [actor.size(np.ones(4 << 20, dtype=np.uint8)) for _ in range(4)]  # arguments in /dev/shm
        assert len(list(shared_memory.SHM_DIR.glob(mine))) >= 4
        os.kill(pid, signal.SIGKILL)
        for call in [blocker, *queued]:
            with pytest.raises(ActorDied):
                call.result(timeout=5)
        assert not list(shared_memory.SHM_DIR.glob(mine)), "argument files of failed calls were left behind"
    finally:
        actor.kill()
    shared_memory.sweep_orphans()  # whatever the dead actor had written
    assert not list(shared_memory.SHM_DIR.glob(f"miles-{pid}-*"))
