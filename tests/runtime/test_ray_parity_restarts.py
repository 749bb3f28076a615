"""Ray parity: max_restarts=-1, a crash inside the constructor counts as a restart, kill(no_restart=False), and a
Ray handle sent to another actor follows the restart (runtime handles sent elsewhere are pinned instead).

Ray sources read: python/ray/actor.py (``max_restarts``: -1 means restart indefinitely), python/ray/_private/
worker.py (``ray.kill(actor, *, no_restart=True)``: with no_restart=False the actor is restarted under its
policy), python/ray/tests/test_actor_failures.py (test_actor_restart*, test_kill_no_restart, a process that dies
during creation is restarted while restarts are left), doc/source/ray-core/fault_tolerance/actors.rst (a restarted
actor serves the tasks submitted after the restart, its state rebuilt by its constructor: Ray's handles name the
actor, not one incarnation). Real actor processes; kills are real SIGKILLs.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from runtime import ActorDied, ActorHandle, spawn

pytestmark = pytest.mark.processes


def _wait_for_new_pid(handle: ActorHandle, old_pid: int, within_s: float = 30.0) -> int:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            pid = handle.method("get_pid")().result(5)
        except Exception:  # restarting: calls wait or fail with ActorRestarted
            time.sleep(0.1)
            continue
        if pid != old_pid:
            return pid
        time.sleep(0.1)
    raise AssertionError(f"the actor was not restarted within {within_s} s")


def test_unlimited_restarts(no_leaks: None) -> None:
    actor = spawn("ray_parity_actors:Relay", max_restarts=-1)
    try:
        pid = actor.method("get_pid")().result(10)
        for _ in range(3):  # more than any finite budget this test could have set by accident
            os.kill(pid, signal.SIGKILL)
            pid = _wait_for_new_pid(actor, pid)
        assert actor.owner.restarts == 3 and actor.dead is None
    finally:
        actor.kill()
    with pytest.raises(ValueError, match="-1 for unlimited"):
        spawn("ray_parity_actors:Relay", max_restarts=-2)


def test_a_crash_inside_the_constructor_counts_against_max_restarts(tmp_path: Path, no_leaks: None) -> None:
    crashes = tmp_path / "crashes"
    crashes.write_text("2")  # the first two incarnations die in __init__, the third comes up
    actor = spawn("ray_parity_actors:CrashingConstructor", kwargs={"counter_path": str(crashes)}, max_restarts=2)
    try:
        assert actor.method("get_pid")().result(10) == actor.pid
        assert actor.owner.restarts == 2 and actor.owner.exit_codes == [3, 3]
    finally:
        actor.kill()
    crashes.write_text("2")
    with pytest.raises(ActorDied, match="exited with code 3"):  # one restart is not enough
        spawn("ray_parity_actors:CrashingConstructor", kwargs={"counter_path": str(crashes)}, max_restarts=1)
    crashes.write_text("1")
    with pytest.raises(ActorDied, match="exited with code 3"):  # and without a policy, the first crash is final
        spawn("ray_parity_actors:CrashingConstructor", kwargs={"counter_path": str(crashes)})


def test_kill_without_no_restart_lets_the_policy_restart_the_actor(no_leaks: None) -> None:
    actor = spawn("sample_actors:Counter", kwargs={"start": 7}, max_restarts=1)
    try:
        old_pid = actor.pid
        actor.add(1).result(10)
        actor.kill(no_restart=False)
        deadline = time.monotonic() + 30
        while actor.pid == old_pid and time.monotonic() < deadline:
            time.sleep(0.05)
        assert actor.pid != old_pid
        assert actor.add(0).result(30) == 7  # a new incarnation: the constructor ran again
        actor.kill(no_restart=False)  # the budget (1) is spent: this death is final
        with pytest.raises(ActorDied, match="max_restarts=1"):
            for _ in range(100):
                actor.add(0).result(10)
                time.sleep(0.1)
    finally:
        actor.kill()
    plain = spawn("sample_actors:Counter")
    try:
        copy = type(plain)(**plain.to_state())
        with pytest.raises(ValueError, match="no restart policy"):
            copy.kill(no_restart=False)
    finally:
        plain.kill()


def test_a_ray_handle_sent_to_another_actor_follows_the_restart(ray_start_regular_shared: None) -> None:
    import runtime.ray_compat as ray

    @ray.remote(max_restarts=1)
    class Tally:
        def __init__(self):
            self.total = 0

        def add(self, n):
            self.total += n
            return self.total

        def pid(self):
            return os.getpid()

    @ray.remote
    class Holder:
        def keep(self, tally):
            self.tally = tally

        def add(self, n):
            return ray.get(self.tally.add.remote(n))

        def seen_boot(self):  # the incarnation this process's connection to the actor last heard from
            return self.tally.native.connection.boot_id

        def pid(self):
            return os.getpid()

    tally, holder = Tally.remote(), Holder.remote()
    ray.get(holder.keep.remote(tally))
    assert ray.get(holder.add.remote(1)) == 1
    old_pid = ray.get(tally.pid.remote())
    holder_pid = ray.get(holder.pid.remote())
    os.kill(holder_pid, signal.SIGSTOP)  # it hears of the restart after it happened (as across hosts)
    try:
        os.kill(old_pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while tally.native.pid == old_pid:  # the spawner's handle follows the restart
            assert time.monotonic() < deadline, "the actor was not restarted within 30 s"
            time.sleep(0.05)
        assert ray.get(tally.add.remote(0)) == 0  # the new incarnation, its constructor run again
    finally:
        os.kill(holder_pid, signal.SIGCONT)
    deadline = time.monotonic() + 10
    while ray.get(holder.seen_boot.remote()) != tally.native.boot_id:
        assert time.monotonic() < deadline, "the holder's connection did not hear from the new incarnation"
        time.sleep(0.05)
    assert ray.get(holder.add.remote(5)) == 5  # the holder's handle calls the new incarnation, unasked
    assert ray.get(tally.add.remote(0)) == 5
    ray.kill(holder)
    ray.kill(tally)
