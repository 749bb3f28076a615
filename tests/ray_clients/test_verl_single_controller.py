"""verl 0.9.1's single controller (RayResourcePool, RayClassWithInitArgs, RayWorkerGroup, colocated and fused
workers, split/merge_resource_pool) driven the way verl's GPU tests drive it, on CPUs with virtual GPUs
(``ray.init(num_gpus=4)``), ``ray`` resolving to runtime.ray_compat and verl's code untouched.

Sources: verl v0.9.0 (483b8a00) tests/single_controller/test_colocated_workers.py, test_split_resource_pool.py and
test_high_level_scheduling_api.py (their flows; the workers here join a gloo group instead of NCCL).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import ray
import torch
import torch.distributed
from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.ray.base import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    create_colocated_worker_cls,
    merge_resource_pool,
    split_resource_pool,
)


@pytest.fixture
def four_gpus() -> Iterator[None]:
    ray.init(num_cpus=64, num_gpus=4)  # verl bundles ask max_colocate_count (10) CPUs each
    try:
        yield
    finally:
        ray.shutdown()


@ray.remote
class Actor(Worker):
    def __init__(self) -> None:
        super().__init__()

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def add(self, data: DataProto):
        data.batch["a"] += self.rank
        return data


@ray.remote
class Critic(Worker):
    def __init__(self, config) -> None:
        super().__init__()
        self.config = config

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    async def sub(self, data: DataProto):
        data.batch["a"] -= self.config["b"]
        return data


@ray.remote
class GlooActor(Worker):
    """verl's FSDP/Megatron workers join their group in the constructor: every peer must construct at once."""

    def __init__(self, worker_id) -> None:
        super().__init__()
        self.worker_id = worker_id
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        torch.distributed.init_process_group(backend="gloo", world_size=world_size, rank=rank)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def add(self, data: DataProto):
        data.batch["a"] += self.rank + self.worker_id
        return data

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def all_reduce(self, value):
        tensor = torch.tensor([float(value)])
        torch.distributed.all_reduce(tensor)
        return tensor.item()


def test_colocated_workers_give_what_separate_ones_give(four_gpus: None) -> None:
    """test_colocated_workers.py: actor and critic as separate worker groups, then fused into one process per GPU
    (create_colocated_worker_cls, spawn); each worker holds its GPU (CUDA_VISIBLE_DEVICES), shared by colocated
    groups."""
    data = DataProto.from_dict({"a": torch.zeros(10)})
    actor_cls = RayClassWithInitArgs(cls=Actor)
    critic_cls = RayClassWithInitArgs(cls=Critic, config={"b": 10})
    resource_pool = RayResourcePool(process_on_nodes=[2])  # use_gpu=True: one virtual GPU per bundle

    actor_wg = RayWorkerGroup(resource_pool=resource_pool, ray_cls_with_init=actor_cls)
    critic_wg = RayWorkerGroup(resource_pool=resource_pool, ray_cls_with_init=critic_cls)
    expected_actor_output = actor_wg.add(data)
    expected_critic_output = critic_wg.sub(data)
    assert expected_actor_output.batch["a"].tolist() == [0.0] * 5 + [1.0] * 5
    gpus = actor_wg.execute_all_sync("get_cuda_visible_devices")
    assert sorted(gpus) == ["0", "1"]  # one GPU per rank
    assert critic_wg.execute_all_sync("get_cuda_visible_devices") == gpus  # colocated on the same bundles

    cls_dict = {"actor": actor_cls, "critic": critic_cls}
    wg_dict = RayWorkerGroup(resource_pool=resource_pool, ray_cls_with_init=create_colocated_worker_cls(cls_dict))
    spawn_wg = wg_dict.spawn(prefix_set=cls_dict.keys())
    torch.testing.assert_close(expected_actor_output.batch, spawn_wg["actor"].add(data).batch, atol=0, rtol=0)
    torch.testing.assert_close(expected_critic_output.batch, spawn_wg["critic"].sub(data).batch, atol=0, rtol=0)
    assert all(actor_wg._is_worker_alive(w) for w in actor_wg.workers)  # ray.experimental.state.api.get_actor


def test_constructors_that_join_a_process_group_with_their_peers_do_not_deadlock(four_gpus: None) -> None:
    """test_split_resource_pool.py: a pool split in two worker groups whose constructors call init_process_group
    with their peers; Ray's .remote() returns at once, so every rank constructs at the same time (a .remote()
    that waited for its constructor would wait for the next rank forever)."""
    pool = RayResourcePool(process_on_nodes=[2, 2])
    pool.get_placement_groups()
    first_pool, second_pool = split_resource_pool(resource_pool=pool, split_size=2)
    first = RayWorkerGroup(resource_pool=first_pool, ray_cls_with_init=RayClassWithInitArgs(cls=GlooActor, worker_id=0))
    second = RayWorkerGroup(
        resource_pool=second_pool, ray_cls_with_init=RayClassWithInitArgs(cls=GlooActor, worker_id=100)
    )
    assert first.world_size == second.world_size == 2
    assert first.all_reduce(1) == [2.0, 2.0]  # a real gloo all-reduce among the constructed ranks
    data = DataProto.from_dict({"a": torch.zeros(4)})
    assert first.add(data).batch["a"].tolist() == [0.0, 0.0, 1.0, 1.0]
    assert second.add(data).batch["a"].tolist() == [100.0, 100.0, 101.0, 101.0]


def test_merged_resource_pools_place_one_group_over_both(four_gpus: None) -> None:
    """test_high_level_scheduling_api.py: merge_resource_pool puts one worker group over two pools' bundles."""
    rm_pool = RayResourcePool([2], name_prefix="rm")
    ref_pool = RayResourcePool([2], name_prefix="ref")
    merged = merge_resource_pool(rm_pool, ref_pool)
    wg = RayWorkerGroup(resource_pool=merged, ray_cls_with_init=RayClassWithInitArgs(cls=Actor))
    assert wg.world_size == 4
    assert sorted(wg.execute_all_sync("get_cuda_visible_devices")) == ["0", "1", "2", "3"]
    assert ray.available_resources()["GPU"] == 0  # the four bundles hold every GPU
