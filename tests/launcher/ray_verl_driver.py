"""A verl-style driver run as a launch's command job (tests/launcher/test_netns_ray_compat.py): verl 0.9.1's
RayResourcePool and RayWorkerGroup, unchanged, over the launch's hosts through ``ray.init(address="auto")``."""

from __future__ import annotations

import json
import os

from runtime.ray_compat.as_ray import install_as_ray

install_as_ray()

import ray  # noqa: E402
import torch  # noqa: E402
import torch.distributed  # noqa: E402
from verl.single_controller.base import Worker  # noqa: E402
from verl.single_controller.base.decorator import Dispatch, register  # noqa: E402
from verl.single_controller.ray.base import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup  # noqa: E402


@ray.remote
class GlooActor(Worker):
    """verl's FSDP/Megatron workers join their group in the constructor (MASTER_ADDR from verl's bundle-0 task)."""

    def __init__(self) -> None:
        super().__init__()
        torch.distributed.init_process_group(backend="gloo", world_size=int(os.environ["WORLD_SIZE"]), rank=self.rank)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def hosts(self) -> list[str]:
        gathered: list[str | None] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(gathered, os.environ.get("MILES_HOST"))
        return [str(host) for host in gathered]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def gpus(self) -> str:
        return os.environ.get("CUDA_VISIBLE_DEVICES", "")


def main() -> None:
    context = ray.init(address="auto")
    nodes = {node["NodeManagerHostname"]: node["NodeManagerAddress"] for node in ray.nodes()}
    pool = RayResourcePool(process_on_nodes=[2, 2], use_gpu=True, max_colocate_count=1)
    group = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(cls=GlooActor))
    out = {
        "context": context["address"],
        "nodes": nodes,
        "resources": ray.cluster_resources().get("GPU"),
        "hosts": group.hosts(),
        "gpus": group.gpus(),
        "master": group._master_addr,
    }
    print("VERL " + json.dumps(out), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
