"""slime's placement groups, train group and Lock (tests/ray_clients/slime_624b824a: slime's own code, unchanged) on
runtime.ray_compat, with a CPU stand-in for its Megatron train actor and virtual GPUs (``ray.init(num_gpus=4)``).

The flow of slime's train.py: ``create_placement_groups(args)`` (one PACK group, an InfoActor per bundle reporting
its node and GPU, bundles sorted by them), ``RayTrainGroup(...).create()`` (actors of ``num_gpus=0.4`` in the
reordered bundles, rank 0's address handed to the others, ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES`` in their
runtime_env, then ``init`` on every rank at once), ``async_train``, and the rollout engine ``Lock`` that every rank
takes around its weight update (slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py).
"""

from __future__ import annotations

import os
import random
import sys
import time
from argparse import Namespace
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import ray
import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).with_name("slime_624b824a")))
from slime_actor_group import RayTrainGroup
from slime_placement_group import create_placement_groups
from slime_ray_utils import Lock, RayActor, add_default_ray_env_vars


class CpuTrainActor(RayActor):
    """slime's TrainRayActor (slime/ray/train_actor.py) as far as it runs without a GPU: the same constructor
    (rank 0 picks the master address, every rank exports it), ``init`` joining the group (gloo), a train step that
    all-reduces, and the weight update's Lock."""

    def __init__(self, world_size, rank, master_addr, master_port):
        self._world_size, self._rank = world_size, rank
        if master_addr:
            self.master_addr, self.master_port = master_addr, master_port
        else:
            self.master_addr, self.master_port = self._get_current_node_ip_and_free_port(
                start_port=random.randint(20000, 21000)
            )
        os.environ["MASTER_ADDR"] = self.master_addr
        os.environ["MASTER_PORT"] = str(self.master_port)
        os.environ["WORLD_SIZE"] = str(self._world_size)
        os.environ["RANK"] = str(self._rank)
        os.environ["LOCAL_RANK"] = str(ray.get_gpu_ids()[0])

    def init(self, args, role, with_ref=False, with_opd_teacher=False):
        self.args, self.role = args, role
        dist.init_process_group(backend="gloo", timeout=timedelta(minutes=args.distributed_timeout_minutes))
        return args.start_rollout_id

    def train(self, rollout_id, rollout_data_ref, external_data=None):
        total = torch.tensor([float(ray.get(rollout_data_ref[self._rank]))])  # refs nested in a list stay refs
        dist.all_reduce(total)
        return total.item()

    def where(self):
        return os.environ.get("CUDA_VISIBLE_DEVICES"), ray.get_gpu_ids(), os.environ["LOCAL_RANK"]

    def set_rollout_manager(self, rollout_manager):
        self.lock = rollout_manager

    def update_weights(self):
        while not ray.get(self.lock.acquire.remote()):
            time.sleep(0.01)
        held = (time.monotonic(), time.sleep(0.2), time.monotonic())
        ray.get(self.lock.release.remote())
        return held[0], held[2]


@pytest.fixture
def four_gpus() -> Iterator[None]:
    ray.init(num_cpus=8, num_gpus=4)
    try:
        yield
    finally:
        ray.shutdown()


def _args() -> Namespace:
    return Namespace(
        actor_num_nodes=1, actor_num_gpus_per_node=2, rollout_num_gpus=2, debug_train_only=False,
        rollout_external=False, debug_rollout_only=False, colocate=False, use_critic=False, train_env_vars={},
        offload_train=False, train_backend="megatron", use_routing_replay=False, distributed_timeout_minutes=2,
        start_rollout_id=0,
    )  # fmt: skip


def test_slime_places_trains_and_locks(four_gpus: None) -> None:
    args = _args()
    pgs = create_placement_groups(args)
    _, bundles, gpu_ids = pgs["actor"]
    assert (bundles, gpu_ids) == ([0, 1, 2, 3], [0, 1, 2, 3])  # InfoActor per bundle: this node, its own GPU
    assert pgs["rollout"][1:] == ([2, 3], [2, 3])  # the rollout engines get the bundles after the actor's
    assert ray.available_resources()["GPU"] == 0  # the group holds them (the InfoActors were killed)

    group = RayTrainGroup(args, num_nodes=1, num_gpus_per_node=2, pg=pgs["actor"], num_gpus_per_actor=0.4,
                          actor_cls=CpuTrainActor)  # fmt: skip
    lock = Lock.options(num_cpus=1, num_gpus=0, runtime_env={"env_vars": add_default_ray_env_vars()}).remote()
    assert group.create(rollout_manager=lock) == [0, 0]  # every rank's init joined the gloo group at once

    actors = group._actor_handlers
    # RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES (in their runtime_env): Ray leaves CUDA_VISIBLE_DEVICES alone
    # and get_gpu_ids() names the bundle's GPU, which slime turns into LOCAL_RANK.
    assert ray.get([a.where.remote() for a in actors]) == [(None, [0], "0"), (None, [1], "1")]
    data = [ray.put(3), ray.put(4)]  # slime hands each rank its part of the rollout as refs
    assert ray.get(group.async_train(0, data)) == [7.0, 7.0]

    held = sorted(ray.get([a.update_weights.remote() for a in actors]))
    assert held[0][1] <= held[1][0]  # the Lock let one rank in at a time
