"""The host agent's fork server (runtime/processes/fork_server.py, launcher/agent/zygote_client.py) with real agents,
workers and calls.

A worker forked by the zygote must be indistinguishable from one ``subprocess.Popen`` started
(runtime/worker.py run as ``python -m``): it answers calls, sees the request's environment, cwd and
``sys.path``, has its own boot id and random streams, its exit code or signal reaches the agent, and it dies with the
agent.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from launch_helpers import HERE, PYTHON, subprocess_env
from test_host_agent import AgentProc
from test_host_agent import _gone as gone_within

import runtime
from launcher.agent import agent_protocol as proto
from runtime import internals
from runtime.core.control_auth import SpawnTicket
from runtime.processes import fork_server as zygote

pytestmark = pytest.mark.processes


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProc]:
    proc = AgentProc(tmp_path)
    yield proc
    proc.close()


def spawn_worker(agent: AgentProc, wid: str, *, env: dict[str, str] | None = None, **fields: Any) -> dict[str, Any]:
    """Spawn ``python -m runtime.worker`` through the agent; its spawned event plus ``ticket``, ``ready``
    line."""
    ticket = SpawnTicket.new()
    agent.send(
        proto.OP_SPAWN,
        id=wid,
        argv=fields.pop("argv", [PYTHON, "-m", "runtime.worker", "--bind", "tcp://127.0.0.1:0"]),
        env={"MILES_CURVE_DIR": "", **(env or {})},
        stdin=ticket.line(),
        ready={"kind": "line", "prefix": proto.READY_PREFIX, "deadline_s": 30},
        **fields,
    )
    spawned = agent.expect(proto.EV_SPAWNED, id=wid, timeout=30)
    return {**spawned, "ticket": ticket}


def event_of(agent: AgentProc, ev: str, wid: str) -> dict[str, Any]:
    """The agent's ``ev`` event about ``wid``: already seen (while waiting for another one), or still to come."""
    seen = [e for e in agent.seen if e.get("ev") == ev and e.get("id") == wid]
    return seen[0] if seen else agent.expect(ev, id=wid, timeout=30)


def attach(agent: AgentProc, spawned: dict[str, Any]) -> tuple[runtime.ActorHandle, dict[str, Any]]:
    ready = json.loads(event_of(agent, proto.EV_READY, spawned["id"])["line"].split(" ", 1)[1])
    handle = internals.attach(
        ready["endpoint"], "zygote_actors:Inspector", ticket=spawned["ticket"], curve_dir=None, deadline_s=30
    )
    return handle, ready


def zygote_pids(agent: AgentProc) -> list[int]:
    """The agent's fork servers. A worker forked a moment ago still shows the zygote's command line (until it
    shows its own argv), so the agent's workers (the pids of its spawned events) are left out."""
    workers = {e.get("pid") for e in agent.seen if e.get("ev") == proto.EV_SPAWNED}
    found = []
    for child in psutil.Process(agent.proc.pid).children():
        with contextlib.suppress(psutil.NoSuchProcess):  # a worker that just exited
            if child.pid not in workers and "runtime.processes.fork_server" in " ".join(child.cmdline()):
                found.append(child.pid)
    return found


def test_forked_worker_answers_calls_with_the_requested_env_cwd_and_sys_path(agent: AgentProc, tmp_path: Path) -> None:
    """env, cwd and PYTHONPATH (a relative entry too) reach the worker; sys.path is what `python -m` makes there."""
    cwd = tmp_path / "work"
    env = {"ZYGOTE_TEST": "from-the-request", "PYTHONPATH": f"rel{os.pathsep}{HERE}"}
    spawned = spawn_worker(agent, "z-0-0", env=env, cwd=str(cwd))
    assert spawned["zygote"] is True
    handle, ready = attach(agent, spawned)
    assert ready["pid"] == spawned["pid"]
    assert handle.env("ZYGOTE_TEST").result(timeout=10) == "from-the-request"
    assert handle.env(proto_marker()).result(timeout=10) == "z-0-0"
    assert handle.cwd().result(timeout=10) == str(cwd)
    python_m = subprocess.run(
        [PYTHON, "-m", "zygote_actors"], cwd=cwd, env={**subprocess_env(), **env}, capture_output=True, timeout=60
    )
    assert handle.sys_path().result(timeout=10) == json.loads(python_m.stdout)
    worker = psutil.Process(spawned["pid"])
    assert worker.ppid() == agent.proc.pid  # re-parented: the agent waits for it
    assert "runtime.worker --bind tcp://127.0.0.1:0" in " ".join(worker.cmdline())  # what ps shows
    assert os.getsid(worker.pid) == worker.pid  # its own session, as start_new_session gives
    log_text = Path(spawned["log_path"]).read_text()
    assert "(forked by the zygote)" in log_text and proto.READY_PREFIX in log_text
    assert f"INFO pid={spawned['pid']} " in log_text  # the worker's own logging setup, with its own pid


def proto_marker() -> str:
    from launcher.agent.child_supervisor import PROC_MARKER

    return PROC_MARKER


def test_forked_siblings_have_their_own_boot_ids_and_random_streams(agent: AgentProc) -> None:
    first, second = (spawn_worker(agent, f"s-0-{i}", env={"PYTHONPATH": str(HERE)}) for i in range(2))
    assert first["zygote"] and second["zygote"]
    (one, ready_one), (two, ready_two) = attach(agent, first), attach(agent, second)
    assert ready_one["boot_id"] != ready_two["boot_id"]
    a, b = one.randomness(5).result(timeout=10), two.randomness(5).result(timeout=10)
    for kind in ("call_ids", "random", "urandom"):
        assert not set(a[kind]) & set(b[kind]), kind
    assert a["call_ids"][0][:16] != b["call_ids"][0][:16]  # the per-process prefix


def test_exit_code_and_signal_of_a_forked_worker_reach_the_agent(agent: AgentProc) -> None:
    leaver = spawn_worker(agent, "e-0-0", env={"PYTHONPATH": str(HERE)})
    handle, _ = attach(agent, leaver)
    handle.leave(3)  # the call itself fails with ActorDied: the process is gone
    exited = agent.expect(proto.EV_EXITED, id="e-0-0", timeout=30)
    assert (exited["returncode"], exited["signal"]) == (3, None)

    killed = spawn_worker(agent, "e-0-1", env={"PYTHONPATH": str(HERE)})
    assert killed["zygote"]
    agent.expect(proto.EV_READY, id="e-0-1", timeout=30)
    os.kill(killed["pid"], signal.SIGKILL)
    exited = agent.expect(proto.EV_EXITED, id="e-0-1", timeout=30)
    assert (exited["returncode"], exited["signal"]) == (-signal.SIGKILL, "SIGKILL")

    bad = [PYTHON, "-m", "runtime.worker", "--bind", "tcp://127.0.0.1:0", "--metrics-port", "99999"]
    refused = spawn_worker(agent, "e-0-2", argv=bad)
    assert refused["zygote"]
    exited = agent.expect(proto.EV_EXITED, id="e-0-2", timeout=30)
    assert exited["returncode"] == 2  # argparse's SystemExit, as `python -m` exits
    assert "--metrics-port must be in 0..65535" in Path(refused["log_path"]).read_text()


def test_kill_command_stops_a_forked_worker(agent: AgentProc) -> None:
    spawned = spawn_worker(agent, "k-0-0")
    agent.expect(proto.EV_READY, id="k-0-0", timeout=30)
    agent.send(proto.OP_KILL, req=5, id="k-0-0", grace_s=5)
    assert agent.expect(proto.EV_KILLED, req=5, timeout=30)["known"] is True
    assert event_of(agent, proto.EV_EXITED, "k-0-0")["pid"] == spawned["pid"]
    assert gone_within([spawned["pid"]])


def test_sigkill_of_the_agent_kills_forked_workers_and_the_zygote(tmp_path: Path) -> None:
    agent = AgentProc(tmp_path)
    pids: list[int] = []
    try:
        for i in range(2):
            spawned = spawn_worker(agent, f"d-0-{i}")
            assert spawned["zygote"]
            agent.expect(proto.EV_READY, id=f"d-0-{i}", timeout=30)
            pids.append(spawned["pid"])
        pids += zygote_pids(agent)
        assert len(pids) == 3
        agent.proc.kill()  # no cleanup possible: the death signals must do it
        agent.proc.wait(timeout=10)
        assert gone_within(pids, timeout=10), "forked workers or the zygote survived the agent"
    finally:
        agent.close()
        for pid in pids:
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass


def test_dead_zygote_falls_back_to_popen_and_is_restarted_once(agent: AgentProc) -> None:
    first = spawn_worker(agent, "f-0-0")
    assert first["zygote"]
    for round_ in range(2):
        (pid,) = zygote_pids(agent)
        os.kill(pid, signal.SIGKILL)
        assert gone_within([pid])
        fallback = spawn_worker(agent, f"f-{round_ + 1}-0")
        assert fallback["zygote"] is False  # that spawn used Popen ...
        event_of(agent, proto.EV_READY, fallback["id"])  # ... and works
        again = spawn_worker(agent, f"f-{round_ + 1}-1")
        assert again["zygote"] is (round_ == 0)  # restarted once, then off
        event_of(agent, proto.EV_READY, again["id"])
    assert zygote_pids(agent) == []


def test_disabled_or_refused_requests_use_popen(tmp_path: Path) -> None:
    """MILES_ZYGOTE=0 on the agent: no zygote at all. With it on, a request that a fork could not honour (an
    import-time variable, a module shadowed from the cwd, another command) goes to Popen, and still works."""
    off = AgentProc(tmp_path / "off", MILES_ZYGOTE="0")
    try:
        spawned = spawn_worker(off, "o-0-0")
        assert spawned["zygote"] is False
        off.expect(proto.EV_READY, id="o-0-0", timeout=30)
        assert zygote_pids(off) == []
    finally:
        off.close()
    on = AgentProc(tmp_path / "on")
    try:
        assert spawn_worker(on, "n-0-0")["zygote"] is True
        assert spawn_worker(on, "n-0-1", env={"OMP_NUM_THREADS": "4"})["zygote"] is False
        assert spawn_worker(on, "n-0-2", env={"MILES_WAIT_SPIN_US": "7"})["zygote"] is False
        shadowing = tmp_path / "shadow"
        shadowing.mkdir()
        (shadowing / "msgpack.py").write_text("raise ImportError('a local msgpack.py shadows the real one')\n")
        assert spawn_worker(on, "n-0-3", cwd=str(shadowing))["zygote"] is False
        script = spawn_worker(on, "n-0-4", argv=[PYTHON, "-c", "print('MILES_ACTOR_READY {}')"])
        assert script["zygote"] is False
        (fork_server,) = zygote_pids(on)
        # A request too large for one datagram (600 KB of environment) is that worker's problem, not the zygote's.
        spawn_worker(on, "n-0-5", env={f"BIG_{i}": "x" * 100_000 for i in range(6)})
        assert spawn_worker(on, "n-0-6")["zygote"] is True
        assert zygote_pids(on) == [fork_server]
        for wid in ("n-0-0", "n-0-1", "n-0-2", "n-0-4", "n-0-5", "n-0-6"):
            event_of(on, proto.EV_READY, wid)
        exited = event_of(on, proto.EV_EXITED, "n-0-3")  # Popen ran it: python -m hit the shadow
        assert exited["returncode"] == 1
    finally:
        on.close()


def test_import_time_rules(tmp_path: Path) -> None:
    """What the zygote refuses, checked without processes (json is loaded here as in the zygote)."""
    assert zygote.import_env_mismatch({"OPENBLAS_NUM_THREADS": "1"}, {"OPENBLAS_NUM_THREADS": "1"}) is None
    assert "PYTHONHASHSEED" in str(zygote.import_env_mismatch({"PYTHONHASHSEED": "0"}, {}))
    assert zygote.import_env_mismatch({"PYTHONPATH": "/x", "PYTHONUNBUFFERED": "1"}, {}) is None
    assert zygote.worker_sys_path("/w", {"PYTHONPATH": "a::/b/"}, ["/lib"]) == ["/w", "/w/a", "/w", "/b", "/lib"]
    assert zygote.worker_sys_path("/w", {"PYTHONPATH": ""}, ["/lib"]) == ["/w", "/lib"]
    import sys

    # In an interpreter that loaded what the zygote loads, its own path shadows nothing (this test process holds
    # modules of every other test, some made up at run time, so it is asked in a fresh one).
    check = (
        "import sys, runtime.worker; from runtime.processes import fork_server as zygote; "
        "print(zygote.shadowed_module(sys.path))"
    )
    fresh = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60, check=True)
    assert fresh.stdout.strip() == "None", fresh.stdout + fresh.stderr
    (tmp_path / "json.py").write_text("")
    assert "json would be imported from " + str(tmp_path / "json.py") in str(
        zygote.shadowed_module([str(tmp_path), *sys.path])
    )


def test_spawned_is_announced_before_ready(agent: AgentProc) -> None:
    """A forked worker prints its ready line within milliseconds: the launcher must still hear ``spawned`` first
    (it drops a ready event for a worker it does not know yet, and would wait for it until the start deadline)."""
    wids = [f"r-0-{i}" for i in range(10)]
    for wid in wids:
        assert spawn_worker(agent, wid)["zygote"]
    for wid in wids:
        event_of(agent, proto.EV_READY, wid)
    order = [(e["ev"], e.get("id")) for e in agent.seen]
    for wid in wids:
        assert order.index((proto.EV_SPAWNED, wid)) < order.index((proto.EV_READY, wid)), wid
