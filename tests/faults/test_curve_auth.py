"""CURVE: key files, authenticated calls, and peers without the cluster's keys refused with nothing run."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
import zmq

from runtime import ActorDied, connect, spawn
from transport import frames as wire
from transport import security
from transport.codec import encode
from transport.protocol import Kind
from transport.sockets import shared_context

pytestmark = pytest.mark.processes


def _submit_hit(socket: zmq.Socket, key: int) -> None:
    meta = [os.urandom(16), "hit", None, None, None, [], False]
    socket.send_multipart(wire.pack(Kind.SUBMIT, meta, encode(([key], {}))))


def _raw_client(endpoint: str, config: security.CurveConfig | None, server_key: str | None = None) -> zmq.Socket:
    socket = shared_context().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    if config is not None:
        security.secure_client(socket, config, (server_key or "").encode())
    socket.connect(endpoint)
    return socket


def test_key_files_are_private_and_checked(tmp_path: Path) -> None:
    keys = security.generate_cluster_keys(tmp_path / "keys")
    folder = Path(keys.directory)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert security.load_curve_keys(folder) == keys
    assert keys.client_secret.decode() not in repr(keys)
    assert sorted(path.name for path in folder.iterdir()) == ["client.key", "client.key_secret"]  # no actor keys
    with pytest.raises(security.CurveKeyError, match="already holds keys"):
        security.generate_cluster_keys(folder)
    os.chmod(folder / "client.key_secret", 0o644)
    with pytest.raises(security.CurveKeyError, match="chmod 600"):
        security.load_curve_keys(folder)
    with pytest.raises(security.CurveKeyError, match="does not exist"):
        security.load_curve_keys(tmp_path / "nowhere")
    with pytest.raises(security.CurveKeyError, match="missing CURVE key file"):
        security.load_curve_keys(tmp_path)


def test_authenticated_calls_work_and_keys_pass_to_children(no_leaks: None, curve_dir: str) -> None:
    target = spawn("fault_actors:Tally", name="target", curve_dir=curve_dir)
    relay = spawn("fault_actors:Tally", name="relay", curve_dir=curve_dir)  # gets MILES_CURVE_DIR
    try:
        assert target.hit(1).result(10) == 1
        assert target.process_health().result(10)["curve"] is True
        assert relay.relay(target, 2).result(20) == 2  # the relay's own connection uses the inherited keys
        assert target.counts().result(10) == {1: 1, 2: 1}
    finally:
        relay.kill()
        target.kill()


def test_clients_without_the_keys_are_refused_and_nothing_runs(no_leaks: None, curve_dir: str, tmp_path: Path) -> None:
    actor = spawn("fault_actors:Tally", name="guarded", curve_dir=curve_dir)
    keys = security.load_curve_keys(curve_dir)
    public, secret = zmq.curve_keypair()
    impostor = security.CurveConfig(keys.directory, public, secret, frozenset())  # not an authorised client key
    raw = [_raw_client(actor.endpoint, None), _raw_client(actor.endpoint, impostor, actor.server_key)]
    try:
        for index, socket in enumerate(raw):
            for key in range(100 * index, 100 * index + 20):
                _submit_hit(socket, key)
        time.sleep(2.0)
        for socket in raw:
            assert not socket.poll(100), "a refused client got an answer"
        started = time.monotonic()  # the runtime fails at once, with a reason, instead of waiting for liveness
        with pytest.raises(ActorDied, match="one side uses CURVE and the other does not"):
            connect(actor.endpoint, curve_dir=None, deadline_s=10)  # the server always says so to a plain client
        other = security.generate_cluster_keys(tmp_path / "other-cluster").directory
        with pytest.raises(ActorDied, match="refused this process's CURVE client key"):
            connect(actor.endpoint, curve_dir=other, deadline_s=10, server_key=actor.server_key)
        assert time.monotonic() - started < 8.0
        assert actor.counts().result(10) == {}  # nothing of theirs ran
        stats = actor.method("__stats__")().result(10)
        assert stats["messages_in"] < 40  # the 40 refused SUBMITs never reached it
    finally:
        for socket in raw:
            socket.close(linger=0)
        actor.kill()


def test_a_curve_client_calling_a_plain_actor_fails_clearly(no_leaks: None, curve_dir: str) -> None:
    plain = spawn("fault_actors:Tally", curve_dir=None)
    try:
        with pytest.raises(ActorDied, match=r"one side uses CURVE|the peer does not use CURVE"):
            connect(plain.endpoint, curve_dir=curve_dir, deadline_s=10, server_key=plain.server_key)
        assert plain.hit(3).result(10) == 3
    finally:
        plain.kill()


def test_each_actor_has_its_own_key_and_nobody_else_can_answer_for_it(no_leaks: None, curve_dir: str) -> None:
    """A process holding the cluster's client key (any worker) cannot pose as an actor: it lacks that actor's own
    secret, which only the actor and its spawner hold (handed over on the worker's stdin, never on disk)."""
    first = spawn("fault_actors:Tally", name="first", curve_dir=curve_dir)
    second = spawn("fault_actors:Tally", name="second", curve_dir=curve_dir)
    rogue = shared_context().socket(zmq.ROUTER)
    try:
        assert first.server_key and second.server_key and first.server_key != second.server_key
        secret = first.process.ticket.server_keys.secret
        for pid in (first.pid, second.pid):
            for part in ("cmdline", "environ"):
                assert secret not in Path(f"/proc/{pid}/{part}").read_bytes()
        for path in Path(curve_dir).rglob("*"):
            assert path.is_dir() or secret not in path.read_bytes()
        # The rogue holds the cluster's keys and a keypair of its own, and listens where "first" is expected.
        security.secure_server(rogue, security.ServerKeys.new())
        port = rogue.bind_to_random_port("tcp://127.0.0.1")
        started = time.monotonic()
        with pytest.raises(ActorDied, match="CURVE handshakes failed in a row"):
            connect(f"tcp://127.0.0.1:{port}", curve_dir=curve_dir, deadline_s=10, server_key=first.server_key)
        assert time.monotonic() - started < 8.0
        assert not rogue.poll(200), "a message reached the impostor"
        assert first.hit(5).result(10) == 5 and second.hit(6).result(10) == 6
    finally:
        rogue.close(linger=0)
        second.kill()
        first.kill()
