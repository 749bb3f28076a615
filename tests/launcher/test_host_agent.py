"""The host agent over real pipes: spawn, readiness, prefixed logs, log files, tree kills, EOF/heartbeat loss."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from launch_helpers import PYTHON, subprocess_env

from launcher.agent import agent_protocol as proto

pytestmark = pytest.mark.processes


class AgentProc:
    """A host agent subprocess driven like the launcher drives it."""

    def __init__(self, workdir: Path, heartbeat_timeout: float = 0.0, **env: str) -> None:
        self.proc = subprocess.Popen(
            [
                PYTHON,
                "-m",
                "launcher.agent.host_agent",
                "--host",
                "testhost",
                "--workdir",
                str(workdir),
                "--heartbeat-timeout",
                str(heartbeat_timeout),
                "--orphan-grace",
                "1",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=subprocess_env(**env),
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.hello = self.expect(proto.EV_HELLO)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            self.events.put(json.loads(raw))

    def send(self, op: str, **fields: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(proto.encode({"op": op, **fields}))
        self.proc.stdin.flush()

    def expect(self, ev: str, timeout: float = 15.0, **match: Any) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.seen.append(event)
            if event.get("ev") == ev and all(event.get(k) == v for k, v in match.items()):
                return event
        raise AssertionError(f"no {ev} {match} within {timeout}s; seen: {self.seen[-10:]}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def agent(tmp_path: Path) -> Any:
    proc = AgentProc(tmp_path)
    yield proc
    proc.close()


def _tree_spawn(agent: AgentProc, tmp_path: Path, wid: str = "pool-0-0") -> dict[str, int]:
    port = agent_port(agent)
    pidfile = tmp_path / f"{wid}.pids"
    agent.send(
        proto.OP_SPAWN,
        id=wid,
        argv=[PYTHON, "-m", "launch_workers", "tree", str(pidfile), str(port)],
        env={},
        ready={"kind": "tcp", "port_number": port, "deadline_s": 20},
    )
    agent.expect(proto.EV_SPAWNED, id=wid)
    agent.expect(proto.EV_READY, id=wid)
    return json.loads(pidfile.read_text())


def agent_port(agent: AgentProc) -> int:
    agent.send(proto.OP_PORTS, req=99, n=1)
    return agent.expect(proto.EV_PORTS, req=99)["ports"][0]


def _gone(pids: list[int], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.Error:
                pass
        if not alive:
            return True
        time.sleep(0.05)
    return False


def test_hello_reports_versions(agent: AgentProc) -> None:
    hello = agent.hello
    assert hello["host"] == "testhost" and hello["pid"] == agent.proc.pid
    assert hello["package_version"] is not None and hello["python"].count(".") == 2
    assert hello["cpus"] == len(os.sched_getaffinity(agent.proc.pid))  # the run-time placement ledger counts them


def test_spawn_ready_line_logs_and_exit_code(agent: AgentProc, tmp_path: Path) -> None:
    code = (
        "import sys; print('hello out'); print('MILES_ACTOR_READY {\"x\": 1}'); "
        "print('oops', file=sys.stderr); sys.exit(3)"
    )
    agent.send(
        proto.OP_SPAWN,
        req=1,
        id="p-0-0",
        argv=[PYTHON, "-c", code],
        env={"FOO": "bar"},
        ready={"kind": "line", "prefix": proto.READY_PREFIX, "deadline_s": 10},
    )
    spawned = agent.expect(proto.EV_SPAWNED, id="p-0-0")
    assert spawned["req"] == 1
    ready = agent.expect(proto.EV_READY, id="p-0-0")
    assert ready["line"].startswith(proto.READY_PREFIX)
    exited = agent.expect(proto.EV_EXITED, id="p-0-0")
    assert exited["returncode"] == 3 and exited["pid"] == spawned["pid"]
    logs = [e for e in agent.seen if e["ev"] == proto.EV_LOG]
    prefix = f"(p-0-0 pid={spawned['pid']} host=testhost) "
    assert any(e["stream"] == "stdout" and e["text"] == prefix + "hello out" for e in logs)
    assert any(e["stream"] == "stderr" and e["text"] == prefix + "oops" for e in logs)
    text = Path(spawned["log_path"]).read_text()
    assert "hello out" in text and "oops" in text and "exited returncode=3" in text


def test_spawn_failure_and_bad_commands(agent: AgentProc) -> None:
    agent.send(proto.OP_SPAWN, req=5, id="p-0-0", argv=["/nonexistent/binary"], env={})
    failed = agent.expect(proto.EV_SPAWN_FAILED, req=5)
    assert "/nonexistent/binary" in failed["error"]
    agent.send("frobnicate", req=6)
    assert "unknown op" in agent.expect(proto.EV_ERROR, req=6)["error"]
    agent.send(proto.OP_SPAWN, req=7)  # no id/argv
    assert "bad spawn" in agent.expect(proto.EV_ERROR, req=7)["error"]


def test_ports_are_unique_and_free(agent: AgentProc) -> None:
    agent.send(proto.OP_PORTS, req=1, n=20)
    first = agent.expect(proto.EV_PORTS, req=1)["ports"]
    agent.send(proto.OP_PORTS, req=2, n=20)
    second = agent.expect(proto.EV_PORTS, req=2)["ports"]
    assert len(set(first) | set(second)) == 40


def test_readiness_deadline_reports_not_ready(agent: AgentProc) -> None:
    port = agent_port(agent)
    agent.send(
        proto.OP_SPAWN,
        id="slow-0-0",
        argv=[PYTHON, "-m", "launch_workers", "sleep_forever"],
        env={},
        ready={"kind": "tcp", "port_number": port, "deadline_s": 1.0},
    )
    not_ready = agent.expect(proto.EV_NOT_READY, id="slow-0-0")
    assert "not ready after 1s" in not_ready["error"]
    agent.send(proto.OP_KILL, req=3, id="slow-0-0", grace_s=1)
    agent.expect(proto.EV_KILLED, req=3)


def test_kill_stops_whole_tree_including_escaped_daemon(agent: AgentProc, tmp_path: Path) -> None:
    pids = _tree_spawn(agent, tmp_path)
    agent.send(proto.OP_LIST, req=2)
    listing = agent.expect(proto.EV_LISTING, req=2)["procs"]
    assert listing[0]["alive"] and listing[0]["ready"]
    agent.send(proto.OP_KILL, req=3, id="pool-0-0", grace_s=1.0)  # the child ignores SIGTERM -> SIGKILL
    agent.expect(proto.EV_EXITED, id="pool-0-0")
    agent.expect(proto.EV_KILLED, req=3)
    assert _gone(list(pids.values()))


def test_dead_worker_leftovers_are_killed(agent: AgentProc, tmp_path: Path) -> None:
    pids = _tree_spawn(agent, tmp_path)
    os.kill(pids["main"], signal.SIGKILL)
    exited = agent.expect(proto.EV_EXITED, id="pool-0-0")
    assert exited["signal"] == "SIGKILL"
    assert _gone([pids["child"], pids["orphan"]])


def test_stdin_eof_kills_everything(tmp_path: Path) -> None:
    agent = AgentProc(tmp_path)
    try:
        pids = _tree_spawn(agent, tmp_path, "a-0-0") | {"agent": agent.proc.pid}
        assert agent.proc.stdin is not None
        agent.proc.stdin.close()
        agent.proc.wait(timeout=10)
        assert _gone(list(pids.values()))
    finally:
        agent.close()


def test_heartbeat_loss_kills_everything(tmp_path: Path) -> None:
    agent = AgentProc(tmp_path, heartbeat_timeout=1.5)
    try:
        started = time.monotonic()
        pids = _tree_spawn(agent, tmp_path, "a-0-0")
        for _ in range(4):  # heartbeats keep it alive
            time.sleep(0.5)
            agent.send(proto.OP_HEARTBEAT)
        assert agent.proc.poll() is None
        agent.proc.wait(timeout=10)  # then silence: it stops on its own
        assert time.monotonic() - started < 12
        assert _gone(list(pids.values()))
    finally:
        agent.close()


def test_sigkilled_agent_takes_direct_children_with_it(tmp_path: Path) -> None:
    agent = AgentProc(tmp_path)
    try:
        pids = _tree_spawn(agent, tmp_path, "a-0-0")
        agent.proc.kill()  # no cleanup possible: PR_SET_PDEATHSIG must do it
        agent.proc.wait(timeout=10)
        assert _gone([pids["main"]])
    finally:
        agent.close()
        for pid in pids.values():  # grandchildren of a SIGKILLed agent are out of its reach: ours to clean
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass


@pytest.mark.parametrize("how", ["shutdown", "stdin EOF"])
def test_curve_keys_are_written_private_and_removed_on_exit(tmp_path: Path, how: str) -> None:
    agent = AgentProc(tmp_path)
    try:
        files = {"server.key": "public\n", "server.key_secret": "secret\n"}
        agent.send(proto.OP_CURVE_KEYS, req=1, dir="curve-1-2-testhost", files=files)
        path = Path(agent.expect(proto.EV_CURVE_KEYS, req=1)["path"])
        assert path == (tmp_path / "curve-1-2-testhost").resolve()
        assert oct(path.stat().st_mode & 0o777) == oct(0o700)
        assert {p.name: p.read_text() for p in path.iterdir()} == files
        assert all(p.stat().st_mode & 0o777 == 0o600 for p in path.iterdir())
        for req, bad in enumerate(
            [
                {"dir": "../escape", "files": files},
                {"dir": "curve-x/y", "files": files},
                {"dir": "curve-ok", "files": {"../x": "y"}},
                {"dir": "curve-ok", "files": {}},
            ],
            start=2,
        ):
            agent.send(proto.OP_CURVE_KEYS, req=req, **bad)
            assert "bad curve_keys command" in agent.expect(proto.EV_ERROR, req=req)["error"]
        assert not (tmp_path / "curve-ok").exists() and not (tmp_path.parent / "escape").exists()
        if how == "shutdown":
            agent.send(proto.OP_SHUTDOWN, grace_s=1)
        else:
            assert agent.proc.stdin is not None
            agent.proc.stdin.close()
        agent.expect(proto.EV_BYE)
        assert not path.exists(), "the agent left the CURVE keys behind"
    finally:
        agent.close()


def test_console_shows_warnings_prints_and_tracebacks_but_not_info(agent: AgentProc) -> None:
    """stream_logs="warnings" (the default): INFO records and the ready line stay in the log file only."""
    code = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO, format='%(asctime)s %(levelname)s pid=1 %(name)s: %(message)s')\n"
        "log = logging.getLogger('actor')\n"
        "log.info('quiet info\\nwith a second line')\n"
        "print('MILES_ACTOR_READY {}', flush=True)\n"
        "print('a print from actor code', flush=True)\n"
        "log.warning('loud warning')\n"
        "try:\n"
        "    1 / 0\n"
        "except ZeroDivisionError:\n"
        "    log.exception('it failed')\n"
        "log.info('quiet again')\n"
    )
    agent.send(
        proto.OP_SPAWN,
        req=1,
        id="p-0-0",
        argv=[PYTHON, "-c", code],
        env={},
        ready={"kind": "line", "prefix": proto.READY_PREFIX, "deadline_s": 10},
        stream_logs="warnings",
    )
    spawned = agent.expect(proto.EV_SPAWNED, id="p-0-0")
    agent.expect(proto.EV_READY, id="p-0-0")
    agent.expect(proto.EV_EXITED, id="p-0-0")
    shown = "\n".join(e["text"] for e in agent.seen if e["ev"] == proto.EV_LOG)
    for expected in (
        "a print from actor code",
        "WARNING pid=1 actor: loud warning",
        "ERROR pid=1 actor: it failed",
        "Traceback (most recent call last):",
        "ZeroDivisionError: division by zero",
    ):
        assert expected in shown, shown
    for hidden in ("quiet info", "with a second line", "quiet again", proto.READY_PREFIX):
        assert hidden not in shown, shown
    text = Path(spawned["log_path"]).read_text()
    for everything in ("quiet info", "with a second line", proto.READY_PREFIX, "loud warning", "quiet again"):
        assert everything in text
