"""``ray.get_runtime_context()``: who and where the caller is (job, node, actor, its GPUs, namespace), as Ray's
python/ray/runtime_context.py; in a driver the actor's fields are None or raise, as in Ray."""

from __future__ import annotations

import os
from typing import Any

from runtime.objects import object_owner
from runtime.ray_compat import cluster, state
from runtime.ray_compat.resources import node_id

#: The GPU ids an actor was given (``num_gpus``), set in its environment by ray_compat.
RAY_GPU_IDS = "MILES_RAY_GPU_IDS"


class RuntimeContext:
    """The context as Ray code reads it: in an actor ``current_actor`` is a handle to the actor itself and
    ``get_actor_id()`` its id; ``get_accelerator_ids()`` lists the GPUs in ``CUDA_VISIBLE_DEVICES`` (which
    ``num_gpus`` set for the actor)."""

    @property
    def _actor(self) -> Any:
        return object_owner.own_handle()

    def get_job_id(self) -> str:
        return f"{os.getppid() if self._actor else os.getpid():08x}"

    def get_node_id(self) -> str:
        return (cluster.this_node_id() if state.current().cluster else None) or node_id()

    def get_actor_id(self) -> str | None:
        found = self._actor
        return None if found is None else f"{found[1].name}:{found[1].boot_id}"

    def get_actor_name(self) -> str | None:
        found = self._actor
        return None if found is None else found[1].name

    def get_worker_id(self) -> str:
        return f"{os.getpid()}"

    def get_task_id(self) -> str | None:
        raise NotImplementedError("task ids are not kept; use get_actor_id(), or the call id of a PendingCall")

    @property
    def current_actor(self) -> Any:
        from runtime.ray_compat.handles import ActorHandle

        found = self._actor
        if found is None:
            raise RuntimeError("This method is only available when the process is a worker of an actor.")
        return ActorHandle(found[0])

    @property
    def namespace(self) -> str:
        session = state.running()
        return session.namespace if session is not None else ""

    @property
    def was_current_actor_reconstructed(self) -> bool:
        """Whether this actor was restarted (a property, as Ray's)."""
        return object_owner.restarts() > 0  # also in the constructor, as Ray's

    def get_accelerator_ids(self) -> dict[str, list[str]]:
        """The GPUs ray_compat gave this actor (also under RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES), else
        those in CUDA_VISIBLE_DEVICES (an actor the launcher started)."""
        visible = os.environ.get(RAY_GPU_IDS, os.environ.get("CUDA_VISIBLE_DEVICES", ""))
        return {"GPU": [g for g in visible.split(",") if g.strip()]}

    def get_assigned_resources(self) -> dict[str, float]:
        return {"GPU": float(len(self.get_accelerator_ids()["GPU"]))}


def get_runtime_context() -> RuntimeContext:
    return RuntimeContext()


def get_gpu_ids() -> list[int]:
    """``ray.get_gpu_ids()``: the GPUs of this actor (``CUDA_VISIBLE_DEVICES``)."""
    return [int(g) for g in get_runtime_context().get_accelerator_ids()["GPU"] if g.isdigit()]
