"""Every holder of a handle sees an actor's death at once, not only its spawner; a busy actor is never taken for dead.

Compared against Ray: there every process holding an actor handle subscribes to the GCS actor table, and
``ActorManager::HandleActorStateNotification`` (src/ray/core_worker/actor_manager.cc) disconnects the actor on a
DEAD notification, failing pending and later tasks with ActorDiedError; python/ray/tests/test_actor_failures.py
kills actor processes with SIGKILL and checks that callers, including actors holding a handle and callers of an
actor whose owner died, get RayActorError. We have no GCS: each caller's DEALER socket monitor sees the link
drop, a probe PING goes out, and refused reconnects mean the process is gone (runtime.caller.link_liveness,
transport.link_watch); the spawner's process watcher reports the exit code. These tests time each case with real
processes: SIGKILL, then the caller's ActorDied within 1 s.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_helpers import HERE, read_line, stop_process

from runtime import ActorDied, ActorHandle, get_actor, spawn
from runtime.core.control_auth import SpawnTicket
from runtime.internals import attach
from runtime.names.naming import REGISTRY_ENV
from runtime.processes.process import READY_PREFIX, ActorProcess, child_environment, worker_command

pytestmark = pytest.mark.processes

SEEN_WITHIN_S = 1.0  # the target on one host
SEEN_ACROSS_HOSTS_WITHIN_S = 2.0
CONSTRUCTOR_DEATH_WITHIN_S = 2.0
NETNS_SH = HERE.parent / "launcher" / "netns.sh"
NETNS_OCTET = "79"  # the launcher's netns tests use 77


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A shared name registry for this test: names registered in actor processes are found by get_actor here."""
    directory = tmp_path / "registry"
    monkeypatch.setenv(REGISTRY_ENV, str(directory))
    return str(directory)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def _child_of_another_process(name: str, registry: str) -> Iterator[tuple[ActorHandle, ActorHandle]]:
    """(spawner, child): an actor that spawned ``name``, and the child's handle as it reached us. This process is
    not the child's spawner, so only the link watch can tell it that the child died."""
    spawner = spawn("death_actors:Spawner", name=f"{name}-spawner", env={REGISTRY_ENV: registry})
    child: ActorHandle | None = None
    try:
        child = spawner.spawn_child(name).result(timeout=60)
        assert child.connection.exit_watched is False
        yield spawner, child
    finally:
        spawner.kill()  # its child dies with it (PR_SET_PDEATHSIG); this makes sure
        if child is not None:
            _kill(child.pid)


@pytest.mark.parametrize("obtained", ["get_actor", "to_state"])
def test_a_handle_not_from_the_spawner_sees_a_sigkill_within_1s(no_leaks: None, registry: str, obtained: str) -> None:
    with _child_of_another_process("sleeper-a", registry) as (_, child):
        handle = get_actor("sleeper-a") if obtained == "get_actor" else ActorHandle(**child.to_state())
        assert handle is not child and handle.pid == child.pid
        assert handle.sleep(0.0).result(timeout=10) == 0.0
        in_flight = handle.sleep(30.0)
        time.sleep(0.3)  # the call runs
        killed_at = time.monotonic()
        os.kill(child.pid, signal.SIGKILL)
        with pytest.raises(ActorDied, match="process is gone"):
            in_flight.result(timeout=10)
        seen_after = time.monotonic() - killed_at
        assert seen_after < SEEN_WITHIN_S, f"the call in flight failed {seen_after:.2f} s after the kill"
        started = time.monotonic()
        with pytest.raises(ActorDied):
            handle.sleep(0.0).result(timeout=10)
        assert time.monotonic() - started < 0.2, "a new call to a dead actor must fail at once"
        print(f"\n[{obtained}] call in flight failed {seen_after * 1000:.0f} ms after SIGKILL")


def test_an_idle_handle_learns_of_the_death_without_a_call(no_leaks: None, registry: str) -> None:
    with _child_of_another_process("sleeper-idle", registry) as (_, child):
        handle = ActorHandle(**child.to_state())
        assert handle.sleep(0.0).result(timeout=10) == 0.0  # connected, then idle
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + SEEN_WITHIN_S
        while handle.dead is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert handle.dead is not None, "an idle handle did not learn of the death within 1 s"
        started = time.monotonic()
        with pytest.raises(ActorDied, match="process is gone"):
            handle.sleep(0.0).result(timeout=10)
        assert time.monotonic() - started < 0.2


def test_an_actor_holding_a_handle_sees_the_death_within_1s(no_leaks: None) -> None:
    target = spawn("death_actors:Sleeper", name="target-b")
    holder = spawn("death_actors:Holder", name="holder-b")
    try:
        assert holder.warm(target).result(timeout=20) == 0.0
        pending = holder.sleep_on(target, 30.0)
        time.sleep(0.5)  # the holder's call runs on the target
        killed_at = time.time()
        os.kill(target.pid, signal.SIGKILL)
        outcome = pending.result(timeout=15)
        assert outcome["died"], outcome
        assert outcome["at"] - killed_at < SEEN_WITHIN_S, f"seen {outcome['at'] - killed_at:.2f} s after the kill"
        asked_at = time.time()
        later = holder.call_now(target).result(timeout=10)
        assert later["died"] and later["at"] - asked_at < 0.2, later
        print(f"\n[actor holder] call in flight failed {(outcome['at'] - killed_at) * 1000:.0f} ms after SIGKILL")
    finally:
        holder.kill()
        target.kill()


def test_the_holder_of_a_child_sees_it_die_with_its_owner(no_leaks: None, registry: str) -> None:
    """The spawner of an actor is killed: the child goes with it (PR_SET_PDEATHSIG), and whoever holds the child's
    handle hears of it at once."""
    with _child_of_another_process("orphan", registry) as (spawner, child):
        assert child.sleep(0.0).result(timeout=10) == 0.0
        in_flight = child.sleep(30.0)
        time.sleep(0.3)
        killed_at = time.monotonic()
        os.kill(spawner.pid, signal.SIGKILL)
        with pytest.raises(ActorDied, match="process is gone"):
            in_flight.result(timeout=10)
        seen_after = time.monotonic() - killed_at
        assert seen_after < SEEN_WITHIN_S, f"the child's death was seen {seen_after:.2f} s after its owner's"


def test_an_object_ref_on_a_dead_owner_fails_within_1s(no_leaks: None) -> None:
    """A borrower that fetched before the death, and one whose first fetch comes after it (its first connect is
    refused: the ref names an incarnation that was up, so that counts as a death too)."""
    owner = spawn("death_actors:Sleeper", name="owner-c")
    borrowers = [spawn("death_actors:Holder", name=f"borrower-c{i}") for i in range(2)]
    try:
        ref = owner.make_ref(1000).result(timeout=10)
        first = borrowers[0].get_ref(ref).result(timeout=10)
        assert first["value"] == 1000, first  # this borrower's connection to the owner is open
        killed_at = time.time()
        os.kill(owner.pid, signal.SIGKILL)
        for borrower in borrowers:
            outcome = borrower.get_ref(ref).result(timeout=15)
            assert outcome["died"], outcome
            seen_after = outcome["at"] - killed_at
            assert seen_after < SEEN_WITHIN_S, f"{borrower.actor_name}: get failed {seen_after:.2f} s after the kill"
    finally:
        for borrower in borrowers:
            borrower.kill()
        owner.kill()


def test_a_busy_actor_is_not_declared_dead(no_leaks: None, registry: str) -> None:
    """Blocked 5 s in a sync method: its control lane answers health all along, and no holder calls it dead."""
    holder = spawn("death_actors:Holder", name="holder-d")
    try:
        with _child_of_another_process("busy-d", registry) as (_, busy):
            watched = holder.health_while_busy(busy, 5.0)
            mine = get_actor("busy-d")
            answers = 0
            while not watched.done():
                started = time.monotonic()
                assert mine.process_health().result(timeout=2)["constructed"]
                assert time.monotonic() - started < 1.0
                answers += 1
                time.sleep(0.25)
            report = watched.result(timeout=10)
            assert report["slept"] == 5.0 and report["dead"] is None, report
            assert report["answers"] >= 10 and report["worst_s"] < 1.0, report
            assert answers >= 10 and mine.dead is None
            assert mine.sleep(0.0).result(timeout=10) == 0.0
    finally:
        holder.kill()


class _CuttableLink:
    """A TCP forwarder to an actor whose connections can be cut while it keeps listening."""

    def __init__(self, target: str) -> None:
        host, _, port = target.removeprefix("tcp://").rpartition(":")
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self._listener.getsockname()[1]}"
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._target)
            except OSError:  # the actor is gone: so is this connection
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
                self.accepted += 1
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(1 << 16):
                sink.sendall(data)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Drop every connection now; new ones are still accepted."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone does not)
        self._listener.close()
        self.cut()


def test_a_dropped_link_to_a_live_actor_is_not_a_death(no_leaks: None) -> None:
    """The link drops (the monitor sees DISCONNECTED) but the reconnect lands: the call in flight completes."""
    actor = spawn("death_actors:Sleeper", name="live-e")
    link = _CuttableLink(actor.endpoint)
    try:
        via = ActorHandle(**{**actor.to_state(), "endpoint": link.address})
        assert via.sleep(0.0).result(timeout=10) == 0.0
        in_flight = via.sleep(1.5)
        time.sleep(0.3)
        link.cut()
        assert in_flight.result(timeout=15) == 1.5  # polled after the reconnect
        assert via.dead is None and link.accepted >= 2
        assert via.sleep(0.0).result(timeout=10) == 0.0
    finally:
        link.close()
        actor.kill()


@pytest.mark.parametrize(
    ("how", "code"),
    [("exit", r"exited with code 3\b"), ("system_exit", r"exited with code 4\b"), ("signal", r"killed by SIGKILL")],
)
def test_a_death_in_the_constructor_is_reported_at_once(no_leaks: None, how: str, code: str) -> None:
    started = time.monotonic()
    with pytest.raises(ActorDied, match=code) as failure:
        spawn("death_actors:DiesInConstructor", kwargs={"how": how}, deadline_s=30)
    elapsed = time.monotonic() - started
    assert elapsed < CONSTRUCTOR_DEATH_WITHIN_S, f"reported after {elapsed:.2f} s"
    assert f"leaves by {how} now" in str(failure.value), "the report must show the last line it printed"
    assert "while the actor was being constructed" in str(failure.value)


def test_attach_fails_fast_when_the_worker_dies_in_the_constructor(no_leaks: None) -> None:
    """A launcher's attach: with the worker's process to watch, the exit code and last lines; without, the link
    watch still fails it within a second or so."""
    for watched in (True, False):
        process = ActorProcess("attached")
        try:
            ready = process.wait_ready(30)
            started = time.monotonic()
            with pytest.raises(ActorDied) as failure:
                attach(
                    ready["endpoint"],
                    "death_actors:DiesInConstructor",
                    ticket=process.ticket,
                    kwargs={"how": "exit"},
                    host=ready["host"],
                    deadline_s=30,
                    watch=process if watched else None,
                )
            assert time.monotonic() - started < CONSTRUCTOR_DEATH_WITHIN_S
            expected = "exited with code 3" if watched else "process is gone"
            assert expected in str(failure.value), failure.value
        finally:
            process.kill()


@pytest.fixture
def two_hosts() -> Iterator[list[tuple[str, str]]]:
    """Two "hosts": network namespaces TAG-h1/h2 (10.200.79.11/12) on a bridge; [(namespace, address), ...]."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.fail("network namespaces need root and iproute2 (`ip`); the launcher's netns tests need them too")
    tag = f"mdd{os.getpid()}"
    subprocess.run([str(NETNS_SH), "down", tag], check=False)
    subprocess.run([str(NETNS_SH), "up", tag, NETNS_OCTET, "2"], check=True)
    hosts = [(f"{tag}-h{i}", f"10.200.{NETNS_OCTET}.{10 + i}") for i in (1, 2)]
    try:
        yield hosts
    finally:
        for namespace, _ in hosts:  # anything left in our namespaces is ours: kill by pid
            pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout
            for pid in map(int, pids.split()):
                _kill(pid)
        subprocess.run([str(NETNS_SH), "down", tag], check=False)


def test_a_caller_on_another_host_sees_a_sigkill_within_2s(no_leaks: None, two_hosts: list[tuple[str, str]]) -> None:
    """The actor on h1, its caller on h2 (TCP across a bridge, no same-host twin): SIGKILL of the actor's process,
    then the caller's ActorDied within 2 s."""
    (actor_ns, actor_ip), (caller_ns, _) = two_hosts
    env = child_environment({"MILES_CURVE_DIR": ""})
    ticket = SpawnTicket.new()
    bind = f"tcp://{actor_ip}:0"
    worker = subprocess.Popen(
        ["ip", "netns", "exec", actor_ns, *worker_command(bind, parent_pid=os.getpid(), metrics_port=None)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, start_new_session=True,
    )  # fmt: skip
    caller: subprocess.Popen[str] | None = None
    try:
        assert worker.stdin is not None
        worker.stdin.write(ticket.line())
        worker.stdin.close()
        endpoint = read_line(worker, READY_PREFIX, 30)["endpoint"]
        caller = subprocess.Popen(
            ["ip", "netns", "exec", caller_ns, sys.executable, str(HERE / "death_caller.py"), endpoint],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
        )  # fmt: skip
        assert caller.stdin is not None
        caller.stdin.write(ticket.line())
        caller.stdin.close()
        read_line(caller, "DEATH_CALLER_CALLING ", 60)
        time.sleep(0.3)
        killed_at = time.time()
        worker.kill()  # ``ip netns exec`` execs the worker: this pid is the actor's process
        outcome = read_line(caller, "DEATH_CALLER_DONE ", 30)
        assert outcome["error"] and "process is gone" in outcome["error"], outcome
        assert outcome["route"] == endpoint, "across hosts the caller must use TCP"
        seen_after = outcome["at"] - killed_at
        assert seen_after < SEEN_ACROSS_HOSTS_WITHIN_S, f"seen on the other host {seen_after:.2f} s after the kill"
        print(f"\n[across hosts] call in flight failed {seen_after * 1000:.0f} ms after SIGKILL")
    finally:
        for process in (caller, worker):
            if process is not None:
                stop_process(process, grace_s=2.0)
