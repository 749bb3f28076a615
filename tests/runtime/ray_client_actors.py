"""Actor classes shaped as real Ray code writes them (verl's workers, Ray's docs), for
tests/runtime/test_ray_compat_clients.py; importable by dotted path."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

import runtime.ray_compat as ray


class CodedError(Exception):
    """A user exception with fields of its own (a status code, a payload)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code
        self.detail = {"retry": False}


class Worker:
    """What verl's Worker does that Ray allows: class and static attributes, private methods called remotely,
    a method named like a handle attribute (``method``, ``kill``), ``*args`` / ``**kwargs`` constructors."""

    dispatch_mode = "ONE_TO_ALL"
    registry: dict[str, int] = {"workers": 1}

    def __init__(self, *args, **kwargs) -> None:
        self.args, self.kwargs = args, kwargs

    @staticmethod
    def helper(x: int) -> int:
        return x + 1

    def _query_dispatch_info(self) -> dict:
        return {"args": list(self.args), "kwargs": self.kwargs}

    def method(self, name: str) -> str:
        return f"method {name}"

    def kill(self) -> str:
        return "not the handle's kill"

    def fail(self, code: int) -> None:
        raise CodedError("refused", code)

    def pid(self) -> int:
        return os.getpid()


class Rendezvous:
    """A constructor that waits for its peer's constructor (as init_process_group does): ``.remote()`` of the
    first must return before the second is even started."""

    def __init__(self, me: str, peer: str, directory: str) -> None:
        Path(directory, me).touch()
        deadline = time.monotonic() + 30
        while not Path(directory, peer).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{me}: {peer} never started")
            time.sleep(0.01)
        self.me = me

    def name(self) -> str:
        return self.me


class BrokenInit:
    def __init__(self) -> None:
        raise CodedError("no GPU here", 7)

    def ping(self) -> str:
        return "pong"


class Slow:
    def work(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    def pid(self) -> int:
        return os.getpid()


class Reducer:
    """ray.util.collective from inside actors (verl's checkpoint engines: init_collective_group, broadcast)."""

    def join(self, world_size: int, rank: int, group: str) -> int:
        ray.util.collective.init_collective_group(world_size, rank, backend="gloo", group_name=group)
        return ray.util.collective.get_rank(group)

    def sum_of(self, value: float, group: str) -> float:
        tensor = torch.tensor([value])
        ray.util.collective.allreduce(tensor, group_name=group)
        return tensor.item()

    def broadcast_from_zero(self, value: float, group: str) -> float:
        tensor = torch.tensor([value])
        ray.util.collective.broadcast(tensor, src_rank=0, group_name=group)
        ray.util.collective.barrier(group)
        return tensor.item()

    def leave(self, group: str) -> bool:
        ray.util.collective.destroy_collective_group(group)
        return ray.util.collective.is_group_initialized(group)


class Placer:
    """Places actors of its own into a placement group it was handed or placed in (slime's RolloutManager gets
    its group as an argument and starts its engines in it)."""

    def start_in(self, group, index: int) -> list:
        from runtime.ray_compat.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)
        engine = ray.remote(GpuReporter).options(num_gpus=1, scheduling_strategy=strategy).remote()
        return ray.get(engine.gpus.remote())

    def start_captured(self) -> tuple:
        engine = ray.remote(GpuReporter).options(num_gpus=1).remote()  # no strategy: the captured group's
        return ray.util.get_current_placement_group().id, ray.get(engine.gpus.remote())


class GpuReporter:
    def gpus(self) -> list:
        return ray.get_gpu_ids()
