"""The cluster ledger, in process (milliseconds): totals from hosts.toml and the agents' hellos, pool workers'
GPUs held for the launch, run-time leases granted or refused at once with what is short, fractional GPUs shared as
pools share them, bundles of placement groups as sub-ledgers, and lost hosts taking their leases and groups.

Ray's behaviour it follows: resource requests (``ray._private.utils.resources_from_ray_options``: quantities over 1
whole), placement groups' bundle index errors (python/ray/util/placement_group.py ``check_placement_group_index``:
"bundle index N is invalid"), and node ids of 56 hex digits (``ray.NodeID``)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from launcher.cluster import ClusterLedger
from launcher.config.hosts_config import HostConfig
from launcher.config.placement import plan_placement
from launcher.config.specs import PoolSpec
from runtime.placement import GroupSpec, PlacementRefused, ResourceRequest


def host(name: str, gpus: int = 0, **more: Any) -> HostConfig:
    return HostConfig(name=name, address=f"10.200.0.{name[-1]}", gpus=gpus, workdir="/tmp", **more)


def ledger(*hosts: HostConfig, pools: list[PoolSpec] = (), cpus: int = 4) -> ClusterLedger:  # type: ignore[assignment]
    book = ClusterLedger(hosts, plan_placement(hosts, pools), launch_id="test")
    for config in hosts:
        book.host_up(config.name, cpus=cpus)
    return book


def ask(**resources: float) -> ResourceRequest:
    return ResourceRequest(resources=resources)


def node(book: ClusterLedger, name: str) -> Any:
    return next(view for view in book.nodes() if view.host == name)


def test_totals_come_from_hosts_toml_and_the_agents_hello() -> None:
    book = ClusterLedger([host("h1", 2), host("h2", cpus=8, resources={"disk": 1})], launch_id="run-1")
    assert [view.alive for view in book.nodes()] == [False, False]  # no agent has said hello yet
    with pytest.raises(PlacementRefused, match="no alive host"):
        book.reserve(ask(CPU=1), owner="job", label="Probe")
    book.host_up("h1", cpus=16)
    book.host_up("h2", cpus=16)  # hosts.toml's cpus = 8 wins over what the agent sees
    h1, h2 = book.nodes()
    assert (h1.total, h2.total) == ({"CPU": 16.0, "GPU": 2.0}, {"CPU": 8.0, "disk": 1.0})
    assert h1.gpu_ids == [0, 1] and h1.address == "10.200.0.1" and h1.alive and h1.lost_reason is None
    assert re.fullmatch(r"[0-9a-f]{56}", h1.node_id) and h1.node_id != h2.node_id
    assert [v.node_id for v in ClusterLedger([host("h1", 2)], launch_id="run-1").nodes()] == [h1.node_id]


def test_pool_workers_hold_their_gpus_for_the_launch() -> None:
    trainer = PoolSpec(
        id="trainer", cells=1, workers_per_cell=2, worker={"kind": "serve", "actor_class": "m:C", "gpus": 1}
    )
    engine = PoolSpec(id="engine", cells=1, worker={"kind": "serve", "actor_class": "m:C", "gpus": 0.5})
    book = ledger(host("h1", 2), host("h2", 2), pools=[trainer, engine])
    assert node(book, "h1").available == {"CPU": 4.0, "GPU": 0.0}
    assert node(book, "h2").available == {"CPU": 4.0, "GPU": 1.5}
    assert sorted(lease.lease_id for lease in book.leases()) == [
        "pool:engine-0-0",
        "pool:trainer-0-0",
        "pool:trainer-0-1",
    ]
    with pytest.raises(PlacementRefused) as refused:
        book.reserve(ask(GPU=2), owner="job", label="Learner")
    assert str(refused.value) == (
        "Learner {'GPU': 2.0}: no host has it free (free/total): h1 GPU 0/2 (held by pool trainer x2); "
        "h2 GPU 1.5/2 (held by pool engine x1). "
        "Nothing was started: kill actors, remove placement groups, or add hosts."
    )
    assert book.leases() and node(book, "h2").available["GPU"] == 1.5  # a refusal holds nothing
    grant = book.reserve(ask(GPU=1), owner="job", label="Learner")
    assert (grant.host, grant.gpu_ids, grant.gpu_share) == ("h2", [1], 1.0)  # GPU 0 is shared with the engine


def test_a_lease_is_granted_where_asked_and_returned_when_released() -> None:
    book = ledger(host("h1", 1), host("h2", 2))
    first = book.reserve(ResourceRequest(resources={"GPU": 1, "CPU": 2}, host="h2"), owner="job", label="A")
    assert (first.host, first.address, first.gpu_ids, first.resources) == (
        "h2",
        "10.200.0.2",
        [0],
        {"CPU": 2.0, "GPU": 1.0},
    )
    assert node(book, "h2").available == {"CPU": 2.0, "GPU": 1.0}
    near = book.reserve(ResourceRequest(resources={"CPU": 1}, near_host="h2"), owner="job", label="B")
    plain = book.reserve(ask(CPU=1), owner="job", label="C")
    assert (near.host, plain.host) == ("h2", "h1")  # near the caller, else in hosts.toml order
    on_h1 = ResourceRequest(resources={"GPU": 1}, host="h1")
    held = book.reserve(on_h1, owner="job", label="X")
    with pytest.raises(PlacementRefused) as refused:
        book.reserve(on_h1, owner="job", label="D")
    assert str(refused.value).startswith(
        "D {'GPU': 1.0}: no host has it free (free/total): h1 GPU 0/1 (held by X x1)"  # C holds no GPU
    )
    soft = book.reserve(on_h1.model_copy(update={"soft": True}), owner="job", label="E")
    assert (soft.host, soft.gpu_ids) == ("h2", [1])  # h1 preferred, but full
    for grant in (plain, held, soft, first):
        assert book.release(grant.lease_id) is not None
    assert book.release(plain.lease_id) is None  # released twice: nothing happens
    assert node(book, "h2").available == {"CPU": 3.0, "GPU": 2.0} and node(book, "h1").available == {
        "CPU": 4.0,
        "GPU": 1.0,
    }


def test_fractional_gpus_share_one_gpu_as_pools_do() -> None:
    book = ledger(host("h1", 2))
    shares = [book.reserve(ask(GPU=0.25), owner="job", label=f"s{i}") for i in range(4)]
    assert [(g.gpu_ids, g.gpu_share, g.resources) for g in shares] == [([0], 0.25, {"GPU": 0.25})] * 4  # packed
    spread = book.reserve(ResourceRequest(resources={"GPU": 0.5}, spread=True), owner="job", label="t")
    assert spread.gpu_ids == [1]
    assert book.reserve(ask(GPU=0.5), owner="job", label="u").gpu_ids == [1]
    with pytest.raises(PlacementRefused, match="GPU 0/2"):
        book.reserve(ask(GPU=0.1), owner="job", label="v")
    book.release(shares[0].lease_id)
    assert book.reserve(ask(GPU=0.25), owner="job", label="w").gpu_ids == [0]


def test_spread_goes_to_the_host_with_fewest_run_time_actors() -> None:
    book = ledger(host("h1"), host("h2"), host("h3"))
    hosts = [book.reserve(ResourceRequest(spread=True), owner="job", label=f"a{i}").host for i in range(4)]
    assert hosts == ["h1", "h2", "h3", "h1"]


def test_bad_requests_name_the_host_or_resource_and_the_fix() -> None:
    book = ledger(host("h1", resources={"disk": 2}), host("h2"))
    with pytest.raises(PlacementRefused, match=r"^A: host 'h9' is not a host of this launch \(h1, h2\)$"):
        book.reserve(ResourceRequest(host="h9"), owner="job", label="A")
    with pytest.raises(
        PlacementRefused, match=r"no host declares resource 'tpu' \(hosts.toml: resources = \{tpu = N\}"
    ):
        book.reserve(ask(tpu=1), owner="job", label="B")
    assert book.reserve(ask(disk=2), owner="job", label="C").host == "h1"
    with pytest.raises(ValidationError, match="quantities over 1 must be whole numbers"):
        ask(GPU=1.5)
    with pytest.raises(ValidationError, match="between 0 and"):
        ask(CPU=-1)
    with pytest.raises(ValidationError, match="counted by the host's gpus/cpus fields"):
        host("h3", resources={"GPU": 1})


def test_a_lost_host_takes_its_leases_and_fails_its_groups_whole() -> None:
    book = ledger(host("h1", 1), host("h2", 1))
    alone = book.reserve(ResourceRequest(resources={"CPU": 1}, host="h2"), owner="job", label="A")
    kept = book.reserve(ResourceRequest(resources={"CPU": 1}, host="h1"), owner="job", label="B")
    group = book.create_group(
        GroupSpec(bundles=[{"GPU": 1}, {"GPU": 1}], strategy="STRICT_SPREAD", name="pg"), owner="job"
    )
    inside = book.reserve(
        ResourceRequest(resources={"GPU": 1}, group_id=group.group_id, bundle_index=0), owner="job", label="C"
    )
    assert inside.host == "h1" and node(book, "h1").available == {"CPU": 3.0, "GPU": 0.0}
    lost = book.host_lost("h2", "no heartbeat from the host agent for 3s")
    assert sorted(lease.label for lease in lost.leases) == ["A", "C"] and lost.groups == [group.group_id]
    assert book.group(group.group_id).state == "FAILED" and "host 'h2' lost" in (
        book.group(group.group_id).reason or ""
    )
    h1, h2 = book.nodes()
    assert h1.available == {"CPU": 3.0, "GPU": 1.0} and not h2.alive and h2.lost_reason.startswith("no heartbeat")
    with pytest.raises(PlacementRefused, match=r"host 'h2' is lost \(no heartbeat"):
        book.reserve(ResourceRequest(host="h2"), owner="job", label="D")
    with pytest.raises(PlacementRefused, match="placement group 'pg' was failed: host 'h2' lost"):
        book.reserve(ResourceRequest(group_id=group.group_id), owner="job", label="E")
    assert book.release(alone.lease_id) is None and book.release(kept.lease_id) is not None
    assert node(book, "h1").available == {"CPU": 4.0, "GPU": 1.0}


def test_actors_in_a_bundle_take_from_the_bundle_and_removal_returns_it_all() -> None:
    book = ledger(host("h1", 2), host("h2", 2))
    before = book.nodes()
    group = book.create_group(GroupSpec(bundles=[{"GPU": 1, "CPU": 1}, {"GPU": 1}], strategy="SPREAD"), owner="job")
    assert [(b.host, b.gpu_ids, b.resources) for b in group.bundles] == [
        ("h1", [0], {"CPU": 1.0, "GPU": 1.0}),
        ("h2", [0], {"GPU": 1.0}),
    ]
    in_one = ResourceRequest(resources={"GPU": 0.5, "CPU": 1}, group_id=group.group_id, bundle_index=0)
    first = book.reserve(in_one, owner="job", label="A")
    assert (first.host, first.gpu_ids, first.group_id, first.bundle_index) == ("h1", [0], group.group_id, 0)
    with pytest.raises(PlacementRefused, match=r"has no room \(free/total\): bundle 0 on h1: GPU 0.5/1, CPU 0/1"):
        book.reserve(in_one, owner="job", label="B")
    anywhere = book.reserve(ResourceRequest(resources={"GPU": 1}, group_id=group.group_id), owner="job", label="C")
    assert (anywhere.host, anywhere.bundle_index) == ("h2", 1)
    with pytest.raises(PlacementRefused, match=r"bundle index 2 is invalid: placement group '[0-9a-f]+' has 2 bundle"):
        book.reserve(ResourceRequest(group_id=group.group_id, bundle_index=2), owner="job", label="D")
    view, ended = book.remove_group(group.group_id)
    assert view.state == "REMOVED" and sorted(lease.label for lease in ended) == ["A", "C"]
    assert book.nodes() == before and book.leases() == []
    assert book.release(first.lease_id) is None  # its actor's own release, after the removal, is harmless


def test_a_host_back_after_a_loss_is_whole_less_what_its_pools_hold() -> None:
    engine = PoolSpec(id="engine", cells=1, worker={"kind": "serve", "actor_class": "m:C", "gpus": 1})
    book = ledger(host("h1", 2), pools=[engine])
    book.reserve(ResourceRequest(resources={"GPU": 1, "CPU": 3}), owner="job", label="A")
    lost = book.host_lost("h1", "agent killed")
    assert [lease.label for lease in lost.leases] == ["A"]  # the pool keeps its GPU: its cell restarts there
    book.host_up("h1", cpus=4)
    (h1,) = book.nodes()
    assert h1.alive and h1.lost_reason is None and h1.available == {"CPU": 4.0, "GPU": 1.0}
    assert [lease.lease_id for lease in book.leases()] == ["pool:engine-0-0"]
