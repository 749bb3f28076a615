"""Spawning onto any host of a launch (runtime/placement, launcher/cluster) with real agents on two local hosts:
from the launcher's own process and from a pool's actor, placed where the resources are, with the GPUs the ledger
gave it, refused at once with what is short, queued when asked to wait, and every end (kill(), kill -9, a failing
constructor, its owner's death) returns what it held."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from launch_helpers import launched_here, local_host, wait_for, write_hosts_toml

from launcher.launch.worker_provider import WorkerProvider
from runtime import ActorDied, placement, spawn
from runtime.placement import PlacementRefused, PlacementShort, ResourceRequest

pytestmark = pytest.mark.processes

COUNTER = {"kind": "serve", "actor_class": "launch_actors:Counter", "gpus": 1}


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProvider]:
    """n0 runs the pool's Counter; n1 (2 GPU labels, 4 CPUs) runs nothing until actors are placed there."""
    tmp_path = tmp_path_factory.mktemp("placed")
    hosts = [local_host("n0", tmp_path / "n0", gpus=1), local_host("n1", tmp_path / "n1", gpus=2, cpus=4)]
    path = write_hosts_toml(
        tmp_path, hosts, [{"id": "c", "worker": COUNTER, "hosts": ["n0"]}], gpu_check=False, heartbeat_timeout_s=3
    )
    with launched_here(path) as provider:
        yield provider


def free(host: str) -> dict[str, float]:
    return next(node.available for node in placement.nodes() if node.host == host)


def test_an_actor_lands_where_asked_with_the_gpus_the_ledger_gave_it(launch: WorkerProvider) -> None:
    before = free("n1")
    probe = spawn("launch_actors:Probe", resources={"GPU": 1, "CPU": 1}, host="n1")
    where = probe.where().result(timeout=30)
    node = next(n for n in placement.nodes() if n.host == "n1")
    assert (where["host"], where["cuda"], where["node_id"]) == ("n1", "0", node.node_id)
    assert free("n1") == {"CPU": before["CPU"] - 1, "GPU": 1.0}
    (held,) = [lease for lease in placement.holders() if lease.lease_id == where["lease"]]
    assert (held.label, held.host, held.gpu_ids, held.owner) == ("Probe", "n1", [0], f"{os.uname()[1]}:{os.getpid()}")
    other = spawn("launch_actors:Probe", resources={"GPU": 1})  # n0's GPU is the pool's: the next free one is n1's
    assert [other.where().result(timeout=30)[key] for key in ("host", "cuda")] == ["n1", "1"]
    probe.kill()
    other.kill()
    wait_for("both leases returned", lambda: free("n1") == before, 5)


def test_nothing_that_fits_is_refused_at_once_and_waiting_gets_room(launch: WorkerProvider) -> None:
    started = time.monotonic()
    with pytest.raises(PlacementRefused) as refused:
        spawn("launch_actors:Probe", resources={"GPU": 3})
    assert time.monotonic() - started < 5
    assert str(refused.value).startswith(
        "Probe {'GPU': 3.0}: no host has it free (free/total): n0 GPU 0/1 (held by pool c"
    )
    assert "Nothing was started" in str(refused.value)
    started = time.monotonic()
    with pytest.raises(PlacementRefused, match=r"host 'n7' is not a host of this launch \(n0, n1\)"):
        spawn("launch_actors:Probe", placement=ResourceRequest(host="n7", wait_s=30))  # no waiting would help
    assert time.monotonic() - started < 5
    first = spawn("launch_actors:Probe", resources={"GPU": 2}, host="n1")
    got: list[Any] = []
    waiting = threading.Thread(
        target=lambda: got.append(
            spawn("launch_actors:Probe", placement=ResourceRequest(resources={"GPU": 2}, wait_s=30))
        )
    )
    waiting.start()
    time.sleep(1.0)
    assert not got  # it waits for room
    first.kill()
    waiting.join(30)
    assert got and got[0].where().result(timeout=30)["cuda"] == "0,1"
    with pytest.raises(PlacementShort, match=r"still short after waiting 0.5 s: Probe \{'GPU': 2.0\}: no host has"):
        spawn("launch_actors:Probe", placement=ResourceRequest(resources={"GPU": 2}, wait_s=0.5))
    got[0].kill()


def test_a_killed_or_failing_actor_returns_what_it_held(launch: WorkerProvider) -> None:
    before = free("n1")
    probe = spawn("launch_actors:Probe", resources={"GPU": 1}, host="n1")
    pid = probe.where().result(timeout=30)["pid"]
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ActorDied, match=r"actor Probe \(lease rt-\d+, pid \d+\) on n1 was killed by SIGKILL"):
        wait_for("the death", lambda: probe.where().result(timeout=10) and None, 10)
    wait_for("the lease returned", lambda: free("n1") == before, 5)
    with pytest.raises(RuntimeError, match=r"'Probe' method '__construct__' on host 'n1': .*no probe today"):
        spawn("launch_actors:Probe", kwargs={"fail": True}, resources={"GPU": 1}, host="n1")
    wait_for("the failed one's lease returned", lambda: free("n1") == before, 5)
    started_badly = r"(?s)actor Probe \(lease rt-\d+, pid \d+\) on n1 exited with code 1 before it was up; its last"
    with pytest.raises(RuntimeError, match=started_badly + r" output:\n.*Unknown level: 'NO-SUCH-LEVEL'"):
        spawn("launch_actors:Probe", resources={"GPU": 1}, host="n1", env={"MILES_LOG_LEVEL": "NO-SUCH-LEVEL"})
    wait_for("the unstarted one's lease returned", lambda: free("n1") == before, 5)


def test_a_pool_actor_places_its_own_and_they_end_with_it(launch: WorkerProvider) -> None:
    before = free("n1")
    counter = launch.worker_infos("c")[0].handle
    where = counter.place({"CPU": 2}, "n1").result(timeout=60)  # over the wire: the worker's MILES_PLACEMENT_API
    assert where["host"] == "n1" and free("n1")["CPU"] == before["CPU"] - 2
    os.kill(launch.worker_infos("c")[0].pid, signal.SIGKILL)  # its owner dies: it stops renewing
    wait_for("the orphan stopped and its lease returned", lambda: free("n1") == before, 15)
    assert wait_for("the orphan's process gone", lambda: not _alive(where["pid"]), 10)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_placement_groups_reserve_all_or_nothing_and_their_actors_end_with_them(launch: WorkerProvider) -> None:
    before = {node.host: node.available for node in placement.nodes()}
    with pytest.raises(PlacementRefused, match=r"placement group 'pg' \(STRICT_SPREAD, 2 bundle\(s\)\): no distinct"):
        placement.create_group([{"GPU": 1}, {"GPU": 1}], "STRICT_SPREAD", name="pg")  # n0's GPU is the pool's
    spread = placement.create_group([{"CPU": 1}, {"CPU": 1}], "SPREAD", name="spread")
    assert [bundle.host for bundle in spread.bundles] == ["n0", "n1"]
    packed = placement.create_group([{"GPU": 1}, {"GPU": 1}], "STRICT_PACK", name="packed")
    assert [(bundle.host, bundle.gpu_ids) for bundle in packed.bundles] == [("n1", [0]), ("n1", [1])]
    assert free("n1")["GPU"] == 0.0 and {g.name: g.state for g in placement.groups()} == {
        "spread": "CREATED", "packed": "CREATED"
    }  # fmt: skip
    inside = spawn(
        "launch_actors:Probe", placement=ResourceRequest(resources={"GPU": 1}, group_id=packed.group_id, bundle_index=1)
    )
    assert [inside.where().result(timeout=30)[key] for key in ("host", "cuda")] == ["n1", "1"]
    with pytest.raises(PlacementRefused, match=r"bundle index 2 is invalid: placement group 'packed' has 2 bundle"):
        spawn("launch_actors:Probe", placement=ResourceRequest(group_id=packed.group_id, bundle_index=2))
    assert placement.remove_group(packed).state == "REMOVED"
    with pytest.raises(ActorDied, match=r"actor Probe \(lease rt-\d+, pid \d+\) on n1 "):
        wait_for("the group's actor stopped", lambda: inside.where().result(timeout=10) and None, 10)
    placement.remove_group(spread)
    wait_for("every bundle returned", lambda: {node.host: node.available for node in placement.nodes()} == before, 5)
