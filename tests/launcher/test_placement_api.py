"""The launch's placement API (launcher/cluster, runtime/placement) served by a real WorkerProvider on two local
hosts: every host gets an agent (also one no pool runs on), the launcher and its workers see the same hosts with
their CPUs (the agents' count or hosts.toml's), GPUs and custom resources, what the pools hold, a host whose agent
is killed as lost, and a peer without the launch's keys is refused."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from launch_helpers import local_host, wait_for, write_hosts_toml

from launcher.config.hosts_config import load_config
from launcher.launch.worker_provider import WorkerProvider
from runtime import placement
from runtime.internals import ServiceAddress
from runtime.placement import placement_api

pytestmark = pytest.mark.processes

COUNTER = {"kind": "serve", "actor_class": "launch_actors:Counter", "gpus": 1}


def test_every_process_of_a_launch_sees_its_hosts_and_what_the_pools_hold(tmp_path: Path) -> None:
    hosts = [
        local_host("n0", tmp_path / "n0", gpus=2),
        local_host("n1", tmp_path / "n1", cpus=3, resources={"disk": 1}),
    ]
    path = write_hosts_toml(tmp_path, hosts, [{"id": "c", "worker": COUNTER, "hosts": ["n0"]}], gpu_check=False)
    with pytest.raises(placement.PlacementUnavailable, match="needs a launch: miles-launch sets MILES_PLACEMENT_API"):
        placement.nodes()
    with WorkerProvider(load_config(path)) as provider:
        provider.start_all(deadline_s=60)
        assert sorted(provider.agents.connected_hosts()) == ["n0", "n1"]  # n1 runs no pool: connected for placement
        n0, n1 = here = placement.nodes()  # the launcher's own ledger, without a round trip
        cpus = float(len(os.sched_getaffinity(0)))
        assert (n0.host, n0.alive, n0.total) == ("n0", True, {"CPU": cpus, "GPU": 2.0})
        assert n0.available == {"CPU": cpus, "GPU": 1.0}  # the pool's worker holds GPU 0
        assert (n1.host, n1.alive, n1.total, n1.gpu_ids) == ("n1", True, {"CPU": 3.0, "disk": 1.0}, [])
        assert n0.address == "127.0.0.1" and n0.node_id != n1.node_id
        (held,) = placement.holders()
        assert (held.lease_id, held.label, held.host, held.gpu_ids, held.resources) == (
            "pool:c-0-0", "pool c", "n0", [0], {"GPU": 1.0}
        )  # fmt: skip
        worker = provider.worker_infos("c")[0]
        assert worker.env[placement.PLACEMENT_API_ENV] == provider.services.placement_api_env("n0")
        assert worker.handle.nodes().result(timeout=30) == here  # a worker asks over the wire: the same answer

        address = ServiceAddress.from_json(provider.services.placement_api_env(None))
        assert address is not None
        stranger = placement_api.connect(address, deadline_s=2, curve_dir=None)  # no launch keys
        with pytest.raises(placement.PlacementUnavailable, match=r"did not answer nodes within 2 s"):
            stranger.nodes().result(timeout=10)

        os.kill(provider.agents.link("n1").hello["pid"], signal.SIGKILL)
        lost = wait_for("n1 lost", lambda: [n for n in placement.nodes() if not n.alive], 10)
        assert [n.host for n in lost] == ["n1"] and lost[0].lost_reason
