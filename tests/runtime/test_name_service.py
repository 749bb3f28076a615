"""A launch's name service (runtime/names/name_service.py), served from this process as a launcher serves it.

Real actor processes reach it over a CURVE socket; the registry is strict (claims are atomic, entries checked and
bounded); a service that does not answer fails within its deadline naming its endpoint; sync naming calls refuse
to block the runtime's own event loop and their async variants work there. Ray's counterpart, the GCS actor
table (python/ray/_private/worker.py get_actor), is likewise one registry per cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime import ActorHandle, CallRejected, RemoteError, get_actor, spawn
from runtime.names import name_service
from runtime.names.name_registry import NameRegistry, NameRegistryFull
from runtime.names.name_service import NAME_SERVICE_ENV, NameServer, NameServiceClient, NameServiceUnavailable
from runtime.names.service import ServiceAddress
from transport.security import CURVE_DIR_ENV, generate_cluster_keys

pytestmark = pytest.mark.processes


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> Iterator[NameServer]:
    """This process as a launcher: it serves a registry (at most 3 names) with CURVE, as a launch's keys."""
    keys = tmp_path / "keys"
    generate_cluster_keys(keys)
    monkeypatch.setenv(CURVE_DIR_ENV, str(keys))
    server = name_service.serve(curve_dir=str(keys), open_bind=False, registry=NameRegistry(max_names=3))
    try:
        yield server
    finally:
        server.close()


def _client(server: NameServer) -> NameServiceClient:
    return NameServiceClient(server.address("127.0.0.1"))


def test_actors_spawned_by_the_name_authority_register_through_its_service(served: NameServer) -> None:
    relay = spawn("ray_parity_actors:Relay")
    try:
        assert served.registry.lookup("", "svc-child") is None
        relay.spawn_named("svc-child", "").result(30)  # claimed by the relay's process, over the service's socket
        entry = served.registry.lookup("", "svc-child")
        assert entry is not None and "spawn_token" not in entry  # a handle's state, no secret
        assert get_actor("svc-child").add(3).result(10) == 3  # this process: its own registry, no round trip
        assert relay.add_by_name("svc-child", "", 1).result(10) == 4
        with pytest.raises(ValueError, match=f"'svc-child' is taken by a live actor at {entry['endpoint']}"):
            spawn("sample_actors:Counter", name="svc-child")
    finally:
        relay.kill()  # its child dies with it


def test_the_registry_refuses_what_is_too_big_too_many_or_not_a_handle_state(served: NameServer) -> None:
    client = _client(served)
    state = {
        "endpoint": "tcp://127.0.0.1:1", "name": "x", "class_path": "m:C", "boot_id": None, "host": "h", "pid": 1,
        "machine_id": "", "metrics_port": None, "server_key": None,
    }  # fmt: skip
    for i in range(3):
        assert client.call("claim", "", f"n{i}", {**state, "endpoint": f"tcp://h:{i}"}, None, what="t") is None
    with pytest.raises(NameRegistryFull, match=r"holds 3 names \(max_names=3\)"):
        client.call("claim", "", "n3", state, None, what="t")
    assert client.call("forget", "", "n0", "tcp://h:0", what="t") is True
    big = {**state, "class_path": "c" * 1000, "host": "h" * 1000, "machine_id": "m" * 1000, "name": "n" * 1000}
    with pytest.raises(ValueError, match=r"is [0-9]+ bytes, over the limit of 4096"):
        client.call("claim", "", "big", big, None, what="t")
    # Checked by the service itself (a caller without the class's hints): exactly a handle's fields, bounded.
    raw = ActorHandle(
        endpoint=served.address("127.0.0.1").endpoint, name="raw", class_path="?", boot_id=None, host="", pid=0,
        server_key=served.server_key,
    )  # fmt: skip
    with pytest.raises(CallRejected, match="spawn_token"):
        raw.method("claim")("", "secret", {**state, "spawn_token": "t"}, None).result(10)
    with pytest.raises(CallRejected):
        raw.method("claim")("", "long", {**state, "host": "h" * 2000}, None).result(10)
    with pytest.raises(RemoteError, match="is not allowed"):
        raw.method("lookup")("", "../escape").result(10)
    with pytest.raises(CallRejected, match="has no public method 'put'; methods: claim, forget, lookup, names"):
        raw.method("put")("", "n0", state).result(10)  # overwriting whoever holds a name stays the launcher's own


def test_a_service_that_does_not_answer_fails_within_its_deadline_naming_it(no_leaks: None) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody serves
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = NameServiceClient(ServiceAddress(f"tcp://127.0.0.1:{port}", None), deadline_s=1.0)
    started = time.monotonic()
    with pytest.raises(NameServiceUnavailable, match=rf"at tcp://127.0.0.1:{port} \(MILES_NAME_SERVICE\)"):
        client.call("lookup", "", "x", what="t")
    assert time.monotonic() - started < 5
    with pytest.raises(ValueError, match="MILES_NAME_SERVICE='nonsense' is not a name service address"):
        name_service.address_from_env("nonsense")
    for bad in ('{"endpoint": "tcp://127.0.0.1:1"}', '{"endpoint": "tcp://127.0.0.1:1", "server_key": 7}'):
        with pytest.raises(ValueError, match="is not a name service address"):
            name_service.address_from_env(bad)  # a missing key is not "CURVE off": that is said with null
    assert name_service.address_from_env('{"endpoint": "tcp://127.0.0.1:1", "server_key": null}').server_key is None


_CLIENT_SCRIPT = """
import json, os
from runtime import ActorNotFound, get_actor
from runtime.names import naming
from runtime.caller.client import ClientRuntime

out = {"sync": get_actor("on-loop").add(1).result(10)}  # from a plain thread: a sync round trip
runtime = ClientRuntime.get()

async def sync_on_loop():
    get_actor("on-loop")

try:
    runtime.run(sync_on_loop(), timeout_s=10, what="t")
except RuntimeError as exc:
    out["on_loop"] = str(exc)
out["async"] = runtime.run(naming.get_actor_async("on-loop"), timeout_s=15, what="t").add(1).result(10)
try:
    get_actor("nobody")
except ActorNotFound as exc:
    out["missing"] = str(exc)
out["child_env"] = naming.child_env() == {"MILES_NAME_SERVICE": os.environ["MILES_NAME_SERVICE"]}
print(json.dumps(out))
"""


def test_sync_calls_refuse_to_block_the_runtime_loop_and_async_ones_work_there(served: NameServer) -> None:
    """Another process of the launch (a command job's): it reaches the service through MILES_NAME_SERVICE."""
    counter = spawn("sample_actors:Counter", kwargs={"start": 7})
    try:
        served.registry.put("", "on-loop", counter.to_state())
        env = {**os.environ, NAME_SERVICE_ENV: served.address("127.0.0.1").to_json()}
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), *sys.path])
        done = subprocess.run([sys.executable, "-c", _CLIENT_SCRIPT], env=env, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        out = json.loads(done.stdout.decode().splitlines()[-1])
        assert out["sync"] == 8 and out["async"] == 9
        assert "would block the runtime's event loop" in out["on_loop"]
        assert "get_actor_async(...)` there" in out["on_loop"]
        assert out["missing"].startswith("no actor named 'nobody' in the default namespace; known names there: ")
        assert "'on-loop'" in out["missing"] and out["child_env"] is True
    finally:
        counter.kill()
