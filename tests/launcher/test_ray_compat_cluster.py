"""runtime.ray_compat inside a launch (runtime/ray_compat/cluster.py): Ray code joins the launch's cluster with
``ray.init(address="auto")``, sees its hosts in ``ray.nodes()`` and the resource views, and places placement groups,
actors (into bundles, by node affinity) and tasks (into a bundle on another host) across them; a gloo group spans
two hosts. Two local hosts with real agents, the launcher served in this process.

Ray's behaviour followed: python/ray/util/placement_group.py (``placement_group_table``'s ``bundles_to_node_id``),
python/ray/util/scheduling_strategies.py, and verl 0.9's single controller, which sorts its groups by
``ray.nodes()``' ``NodeManagerAddress`` and runs its master-address task in bundle 0."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from launch_helpers import launched_here, local_host, wait_for, write_hosts_toml

import runtime.ray_compat as ray
from actors.processes import free_port
from launcher.launch.worker_provider import WorkerProvider
from runtime import placement
from runtime.ray_compat.util.placement_group import placement_group, placement_group_table, remove_placement_group
from runtime.ray_compat.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProvider]:
    tmp_path = tmp_path_factory.mktemp("raycluster")
    hosts = [local_host(f"n{i}", tmp_path / f"n{i}", gpus=2, cpus=4) for i in range(2)]
    counter = {"kind": "serve", "actor_class": "launch_actors:Counter"}
    path = write_hosts_toml(tmp_path, hosts, [{"id": "c", "worker": counter, "hosts": ["n0"]}], gpu_check=False)
    with launched_here(path) as provider:
        yield provider


@ray.remote
class Where:
    def where(self) -> dict:
        return {
            "host": os.environ.get("MILES_HOST"),
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "node": ray.get_runtime_context().get_node_id(),
            "gpus": [str(g) for g in ray.get_gpu_ids()],
        }


@ray.remote
class GlooMember:
    """verl's workers join their group in the constructor: every peer constructs at once."""

    def __init__(self, rank: int, port: int) -> None:
        import torch.distributed as dist

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=2)

    def gather_hosts(self) -> list[str]:
        import torch.distributed as dist

        hosts: list[str | None] = [None, None]
        dist.all_gather_object(hosts, os.environ.get("MILES_HOST"))
        return [str(h) for h in hosts]


@ray.remote
def host_of_task() -> str | None:
    return os.environ.get("MILES_HOST")


def test_ray_code_in_a_launch_places_across_its_hosts(launch: WorkerProvider) -> None:
    ray.init(address="auto")
    try:
        nodes = ray.nodes()
        ids = {node["NodeManagerHostname"]: node["NodeID"] for node in nodes}
        assert list(ids) == ["n0", "n1"] and all(node["Alive"] for node in nodes)
        assert nodes[1]["Resources"]["GPU"] == 2.0 and nodes[1]["Resources"]["CPU"] == 4.0
        assert (ray.cluster_resources()["GPU"], ray.cluster_resources()["CPU"]) == (4.0, 8.0)

        pg = placement_group([{"GPU": 1, "CPU": 1}] * 2, strategy="STRICT_SPREAD", name="pg")
        ray.get(pg.ready())
        assert placement_group_table(pg)["bundles_to_node_id"] == {0: ids["n0"], 1: ids["n1"]}
        assert ray.available_resources()["GPU"] == 2.0
        in_bundles = [
            Where.options(num_gpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i)).remote()
            for i in range(2)
        ]
        wheres = ray.get([actor.where.remote() for actor in in_bundles])
        assert [(w["host"], w["node"], w["cuda"]) for w in wheres] == [("n0", ids["n0"], "0"), ("n1", ids["n1"], "0")]
        assert [w["gpus"] for w in wheres] == [["0"], ["0"]]
        in_bundle_1 = PlacementGroupSchedulingStrategy(pg, 1)
        assert ray.get(host_of_task.options(scheduling_strategy=in_bundle_1).remote(), timeout=60) == "n1"

        pinned = Where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(ids["n1"], soft=False)).remote()
        assert ray.get(pinned.where.remote())["host"] == "n1"
        shown = r"no host has it free \(free/total\): n0 GPU 1/2 \(held by placement group pg x1\); n1 GPU 1/2 \("
        with pytest.raises(ValueError, match=shown):
            Where.options(num_gpus=2).remote()

        port = free_port()
        spread = placement_group([{"CPU": 1}] * 2, strategy="STRICT_SPREAD")
        members = [
            GlooMember.options(scheduling_strategy=PlacementGroupSchedulingStrategy(spread, rank)).remote(rank, port)
            for rank in range(2)
        ]
        assert ray.get([m.gather_hosts.remote() for m in members], timeout=120) == [["n0", "n1"]] * 2

        remove_placement_group(pg)
        with pytest.raises(ray.exceptions.RayActorError):
            wait_for(
                "the group's actors stopped", lambda: ray.get(in_bundles[0].where.remote(), timeout=10) and None, 10
            )
    finally:
        ray.shutdown()
    # Asked of the launch itself: a ray.* call now would start a new session, left to the next test.
    wait_for("everything returned", lambda: all(n.available == n.total for n in placement.nodes()), 10)
    assert not ray.is_initialized()
