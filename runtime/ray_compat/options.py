"""The options ``@ray.remote`` / ``.options()`` take, checked: supported ones mapped, the rest refused by name, never
silently ignored (Ray's python/ray/_private/ray_option_utils.py and python/ray/runtime_env)."""

from __future__ import annotations

import os
from typing import Any

COMMON = {"num_cpus", "num_gpus", "resources", "scheduling_strategy", "runtime_env", "name"}
ACTOR = COMMON | {
    "namespace", "get_if_exists", "lifetime", "max_restarts", "max_task_retries", "max_concurrency",
    "concurrency_groups",
}  # fmt: skip
TASK = COMMON | {"num_returns", "max_retries", "retry_exceptions"}
METHOD = {"num_returns", "concurrency_group", "max_task_retries", "retry_exceptions", "name"}

#: Accepted by Ray, refused here: why, and what to do instead.
REFUSED = {
    "memory": "memory reservations are not tracked; size the machine (hosts.toml) for the job",
    "object_store_memory": "there is no object store to size: values stay with their owner (runtime.put)",
    "accelerator_type": "GPUs are not typed here; pick hosts by pool in hosts.toml",
    "max_pending_calls": "an actor bounds its queue itself (StoreLimits: calls and bytes, OverCapacity past it)",
    "label_selector": "node labels do not exist here; pick hosts by pool in hosts.toml",
    "fallback_strategy": "node labels do not exist here; pick hosts by pool in hosts.toml",
    "enable_task_events": "there is no task-event dashboard; use the Prometheus /metrics of each actor",
    "_metadata": "runtime.ray_compat has no option plugins",
    "placement_group": "pass scheduling_strategy=PlacementGroupSchedulingStrategy(pg, bundle_index) instead",
    "placement_group_bundle_index": "pass scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i) instead",
    "placement_group_capture_child_tasks": "pass PlacementGroupSchedulingStrategy(pg, i, True) instead",
    "_generator_backpressure_num_objects": "use handle.m.options(window=N) of the native API (default 16)",
    "tensor_transport": "tensors travel out of band (and through shared memory on one host) already",
    "enable_tensor_transport": "tensors travel out of band (and through shared memory on one host) already",
    "allow_out_of_order_execution": "calls of one caller run in order on a sync actor; use max_concurrency",
    "_labels": "node labels do not exist here",
}

_ENV_REFUSED = {
    "pip": "install packages into the job's virtualenv beforehand (pyproject.toml / scripts/setup.sh)",
    "uv": "install packages into the job's virtualenv beforehand (pyproject.toml / scripts/setup.sh)",
    "conda": "install packages into the job's virtualenv beforehand (pyproject.toml / scripts/setup.sh)",
    "py_modules": "put the modules on PYTHONPATH (env_vars) or in the launch's checkout",
    "container": "run the launch inside the container instead",
    "image_uri": "run the launch inside the container instead",
    "py_executable": "actors run with this interpreter (sys.executable); start the driver with the other one",
    "nsight": "run the actor's command under nsys yourself",
    "excludes": "nothing is uploaded: working_dir is used in place",
    "java_jars": "only Python actors exist here",
    "config": "runtime_env config (setup timeouts, eager install) has nothing to configure here",
    "worker_process_setup_hook": "call the setup at the top of the actor's constructor",
}


def check(options: dict[str, Any], allowed: set[str], what: str) -> dict[str, Any]:
    """``options`` if every key is allowed; NotImplementedError for a refused one (an option Ray accepts that this
    runtime cannot honour: the message says what to do instead), ValueError for an unknown one, as Ray's."""
    for key in options:
        if key in allowed:
            continue
        if key in REFUSED:
            raise NotImplementedError(f"{what}: option {key}= is not supported by runtime.ray_compat: {REFUSED[key]}")
        raise ValueError(f"{what}: invalid option {key!r}; valid options are {sorted(allowed)}")
    return options


def runtime_env(env: Any, what: str) -> tuple[dict[str, str], str | None]:
    """(env vars, working dir) of a ``runtime_env``; refuses what would need installing or uploading."""
    if env is None:
        return {}, None
    if not isinstance(env, dict):
        raise ValueError(f"{what}: runtime_env must be a dict, got {type(env).__name__}")
    for key in env:
        if key in _ENV_REFUSED:
            raise NotImplementedError(
                f"{what}: runtime_env[{key!r}] is not supported by runtime.ray_compat: {_ENV_REFUSED[key]}"
            )
        if key not in ("env_vars", "working_dir"):
            raise ValueError(f"{what}: unknown runtime_env field {key!r} (supported: env_vars, working_dir)")
    env_vars = env.get("env_vars") or {}
    if not isinstance(env_vars, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()
    ):
        raise ValueError(f"{what}: runtime_env['env_vars'] must map str to str")
    working_dir = env.get("working_dir")
    if working_dir is not None and (not isinstance(working_dir, str) or not os.path.isdir(working_dir)):
        raise NotImplementedError(
            f"{what}: runtime_env['working_dir']={working_dir!r}: only a local directory is supported (nothing is "
            "uploaded; a remote URI is not fetched)"
        )
    return dict(env_vars), working_dir


def resources_of(options: dict[str, Any], default_cpus: float, what: str) -> dict[str, float]:
    """The resources an actor or task asks for, by Ray's names (``CPU``, ``GPU``, custom)."""
    wants: dict[str, float] = {}
    for key, name, default in (("num_cpus", "CPU", default_cpus), ("num_gpus", "GPU", 0.0)):
        value = options.get(key, default)
        if value is None:
            value = default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{what}: {key} must be a number >= 0, got {value!r}")
        if value:
            wants[name] = float(value)
    for name, amount in (options.get("resources") or {}).items():
        if name in ("CPU", "GPU"):
            raise ValueError(f"{what}: use num_cpus/num_gpus, not resources={{{name!r}: ...}}")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
            raise ValueError(f"{what}: resources[{name!r}] must be a number >= 0, got {amount!r}")
        wants[name] = float(amount)
    return wants


def num_returns(value: Any, what: str) -> int | str:
    if value in ("streaming",) or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    if value == "dynamic":
        raise NotImplementedError(f"{what}: num_returns='dynamic' is deprecated in Ray; use num_returns='streaming'")
    raise ValueError(f"{what}: num_returns must be an int >= 0 or 'streaming', got {value!r}")


#: Ray's FUNCTION_SIZE_ERROR_THRESHOLD (python/ray/_private/ray_constants.py): a pickled function or actor class
#: above it is refused, as it most likely captured a large object by accident.
FUNCTION_SIZE_ERROR_THRESHOLD = 10**8


def check_pickled_size(size: int, what: str) -> None:
    """Ray's "is too large" ValueError for ``what`` ("The remote function m.f", "The actor A") pickled to ``size``."""
    if size > FUNCTION_SIZE_ERROR_THRESHOLD:
        raise ValueError(
            f"{what} is too large ({size // 2**20} MiB > FUNCTION_SIZE_ERROR_THRESHOLD="
            f"{FUNCTION_SIZE_ERROR_THRESHOLD // 2**20} MiB). Check that its definition is not implicitly capturing a "
            "large array or other object in scope. Tip: use ray.put() to put large objects in the Ray object store."
        )
