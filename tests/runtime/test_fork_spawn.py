"""spawn() through this process's fork server (runtime/processes/driver_fork.py, runtime/processes/fork_server.py), its
fallbacks, and
spawn_many. Real actor processes throughout; behaviour only (how fast is bench/actor_bench.py's business)."""

from __future__ import annotations

import ctypes
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from runtime import ActorGroup, spawn, spawn_many
from runtime.processes import driver_fork
from runtime.processes.fork_client import ForkedWorker, become_subreaper
from runtime.processes.orphan_reaper import reap_orphans, zombie_children

pytestmark = pytest.mark.processes


def _gone(pid: int, within_s: float) -> bool:
    try:
        psutil.Process(pid).wait(within_s)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return False
    return True


def test_spawn_forks_actors_that_are_our_children_with_their_own_env_and_gpu_ids(no_leaks: None) -> None:
    first = spawn("fork_actors:Probe", env={"CUDA_VISIBLE_DEVICES": "2,3", "FORK_TEST_VALUE": "one"})
    second = spawn("fork_actors:Probe", env={"CUDA_VISIBLE_DEVICES": "5"})
    try:
        assert isinstance(first.process.popen, ForkedWorker) and isinstance(second.process.popen, ForkedWorker)
        server = driver_fork.server_pid()
        assert server is not None and server not in (first.pid, second.pid)
        # Re-parented to us, as a Popen child is: we reap it and see its exit code.
        assert first.parent().result(10) == os.getpid() == second.parent().result(10)
        assert first.get_pid().result(10) == first.pid
        assert first.env("CUDA_VISIBLE_DEVICES").result(10) == "2,3"
        assert first.env("FORK_TEST_VALUE").result(10) == "one"
        assert second.env("CUDA_VISIBLE_DEVICES").result(10) == "5"
        assert second.env("FORK_TEST_VALUE").result(10) is None
        first.kill()
        assert first.process.wait_exited(10) == -9  # its real exit status
    finally:
        ActorGroup([first, second]).kill()


def test_actors_forked_in_an_actor_die_with_it_and_so_does_its_fork_server(no_leaks: None) -> None:
    nest = spawn("fork_actors:Nest")
    try:
        child = nest.spawn_probe().result(30)
        assert child["forked"], "an actor's own spawn goes through its own fork server"
        server = nest.fork_server_pid().result(10)
        assert server is not None and psutil.Process(child["pid"]).ppid() == nest.pid
        nest.kill()  # SIGKILL: no goodbye
        assert _gone(child["pid"], 10), "a forked actor must die with its spawner"
        assert _gone(server, 10), "the spawner's fork server must die with it"
    finally:
        nest.kill()


def test_a_dead_fork_server_is_restarted_and_the_spawn_meanwhile_uses_popen(
    no_leaks: None, capfd: pytest.CaptureFixture[str]
) -> None:
    nest = spawn("fork_actors:Nest")
    try:
        assert nest.spawn_probe().result(30)["forked"]
        killed = nest.kill_fork_server().result(10)
        assert not nest.spawn_probe().result(30)["forked"], "the spawn that finds it dead starts with Popen"
        assert nest.spawn_probe().result(30)["forked"], "the next one is forked by a new fork server"
        restarted = nest.fork_server_pid().result(10)
        assert restarted not in (None, killed)
        assert f"fork server pid {killed} failed" in capfd.readouterr().err
    finally:
        nest.kill()


def test_what_the_fork_server_cannot_honour_starts_with_popen(no_leaks: None, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="runtime.processes.fork_client")
    # A variable read when the fork server imported the runtime: forking would ignore it.
    probe = spawn("fork_actors:Probe", env={"MILES_WAIT_SPIN_US": "0"})
    # The fork server switched off for an actor's own spawns.
    off = spawn("fork_actors:Nest", env={"MILES_SPAWN_FORK_SERVER": "0"})
    try:
        assert isinstance(probe.process.popen, subprocess.Popen)
        assert probe.env("MILES_WAIT_SPIN_US").result(10) == "0"
        assert "MILES_WAIT_SPIN_US='0'" in caplog.text and "using Popen" in caplog.text
        assert not off.spawn_probe().result(30)["forked"]
        assert off.fork_server_pid().result(10) is None
    finally:
        ActorGroup([probe, off]).kill()


def test_spawn_many_starts_every_actor_and_names_the_one_that_failed(no_leaks: None) -> None:
    probes = spawn_many("fork_actors:Probe", 6)
    try:
        pids = [p.get_pid().result(10) for p in probes]
        assert len(set(pids)) == 6 and pids == [p.pid for p in probes]
        assert all(isinstance(p.process.popen, ForkedWorker) for p in probes)
    finally:
        ActorGroup(probes).kill()
    with pytest.raises(Exception, match="told to fail") as failed:
        spawn_many("fork_actors:Probe", 4, kwargs_each=[{}, {}, {"fail": True}, {}])
    notes = " ".join(getattr(failed.value, "__notes__", []))
    assert "actor 2 of 4" in notes and "the 3 others were stopped" in notes
    # the first failure stops the others at once: ranks waiting in their constructors for a failed peer (a
    # rendezvous) must not hold the spawn until their own timeouts (CI: a trainer group's spawn hung 300 s)
    started = time.monotonic()
    with pytest.raises(Exception, match="told to fail") as failed:
        spawn_many("fork_actors:Probe", 3, kwargs_each=[{"wait_s": 120}, {"fail": True}, {"wait_s": 120}])
    assert time.monotonic() - started < 30, "spawn_many waited for the constructors of the others"
    assert "actor 1 of 3" in " ".join(getattr(failed.value, "__notes__", []))
    with pytest.raises(ValueError, match="count must be an int"):
        spawn_many("fork_actors:Probe", -1)


PR_GET_CHILD_SUBREAPER = 37


def _our_zombies() -> set[int]:
    return {pid for pid, _session in zombie_children(os.getpid())}


def _reaped(pids: list[int], within_s: float) -> bool:
    """Whether every pid is gone, not even a zombie of ours, within the time."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


def _is_subreaper() -> bool:
    flag = ctypes.c_int(-1)
    assert ctypes.CDLL(None).prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0
    return flag.value == 1


def test_orphans_below_an_actor_go_to_init_not_to_the_spawner(no_leaks: None) -> None:
    # The spawner is a child subreaper only while a spawn is under way (the fork server's double-forked worker
    # must come to it), so what is orphaned below its actors later, session leaders too (an engine or a router a
    # controller started), is not re-parented to it and never becomes its zombie.
    probe = spawn("fork_actors:Probe")
    try:
        assert isinstance(probe.process.popen, ForkedWorker) and not _is_subreaper()
        short = probe.orphan(3, 0.2).result(30) + probe.orphan(2, 0.2, own_session=True).result(30)
        long = probe.orphan(2, 60).result(30)
        assert not {psutil.Process(pid).ppid() for pid in long} & {os.getpid()}, "orphans must not come to us"
        assert _reaped(short, 5), f"orphans {short} left as zombies of ours: {_our_zombies()}"
        probe.kill()  # its process group goes with it
        assert _reaped(long, 5), f"a killed actor's orphans {long} are still there: {_our_zombies()}"
        assert probe.process.wait_exited(10) == -9, "the actor itself is still reaped by its own waiter"
    finally:
        probe.kill()


def test_an_orphan_that_comes_while_we_are_a_subreaper_is_reaped(no_leaks: None) -> None:
    probe = spawn("fork_actors:Probe")
    try:
        assert become_subreaper(True)  # as during a spawn's window
        try:
            (orphan,) = probe.orphan(1, 0.1).result(30)
            deadline = time.monotonic() + 10
            while orphan not in _our_zombies():
                assert time.monotonic() < deadline, "the orphan did not come to us while we were a subreaper"
                time.sleep(0.02)
        finally:
            become_subreaper(False)
        assert _reaped([orphan], 5), "the orphan reaper must reap it (a zombie in the actor's session)"
    finally:
        probe.kill()


def test_the_orphan_reaper_leaves_our_own_children_to_whoever_waits_for_them(no_leaks: None) -> None:
    probe = spawn("fork_actors:Probe")  # the reaper runs once this process spawns through its fork server
    try:
        in_our_session = subprocess.Popen(["sh", "-c", "exit 5"])
        own_session = subprocess.Popen(["sh", "-c", "exit 7"], start_new_session=True)
        deadline = time.monotonic() + 10
        while not {in_our_session.pid, own_session.pid} <= _our_zombies() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not {in_our_session.pid, own_session.pid} & set(reap_orphans())
        time.sleep(2.5)  # the reaper's thread has looked at least twice
        assert in_our_session.wait(5) == 5 and own_session.wait(5) == 7, "exit statuses must reach their Popen"
    finally:
        probe.kill()


def test_modules_named_in_miles_fork_preload_are_loaded_before_each_fork(
    no_leaks: None, capfd: pytest.CaptureFixture[str]
) -> None:
    module = "xml.dom.minidom"  # imported by neither the runtime nor the probe
    preloading = spawn("fork_actors:Nest", env={"MILES_FORK_PRELOAD": f" {module}, "})
    plain = spawn("fork_actors:Nest")
    broken = spawn("fork_actors:Nest", env={"MILES_FORK_PRELOAD": "no_such_module_for_preload"})
    try:
        assert preloading.spawn_probe(module=module).result(30) | {"pid": 0} == {
            "pid": 0, "forked": True, "had_module": True
        }  # fmt: skip
        assert plain.spawn_probe(module=module).result(30)["had_module"] is False
        # A preload that cannot be honoured costs the fork server, never the actor: it starts with Popen.
        assert broken.spawn_probe(module=module).result(30) | {"pid": 0} == {
            "pid": 0, "forked": False, "had_module": False
        }  # fmt: skip
        assert "cannot import no_such_module_for_preload (MILES_FORK_PRELOAD)" in capfd.readouterr().err
    finally:
        ActorGroup([preloading, plain, broken]).kill()


def _preload_in_a_fresh_interpreter(tmp_path: Path, modules: str) -> str:
    code = "from runtime.processes.fork_server import preload; print(preload())"
    env = {"MILES_FORK_PRELOAD": modules, "PYTHONPATH": f"{tmp_path}:{Path.cwd()}", "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_module_that_starts_a_thread_or_does_not_import_is_refused_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "starts_thread.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
    )
    (tmp_path / "quiet_module.py").write_text("VALUE = 1\n")
    assert _preload_in_a_fresh_interpreter(tmp_path, "quiet_module") == "None"
    assert _preload_in_a_fresh_interpreter(tmp_path, "quiet_module,starts_thread") == (
        "importing starts_thread (MILES_FORK_PRELOAD) started 1 thread(s): leave it out of MILES_FORK_PRELOAD"
    )
    assert _preload_in_a_fresh_interpreter(tmp_path, "not_there").startswith(
        "cannot import not_there (MILES_FORK_PRELOAD): ModuleNotFoundError"
    )
