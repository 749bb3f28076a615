"""Engines as launcher-placed workers: the hosts.toml pool of an inference server, rendered from SGLangConfig.

The launcher knows nothing of SGLang: an engine pool is a ``command`` (or ``serve``) pool rendered here."""

from __future__ import annotations

import shlex
from typing import Any

from actors.model_config import ModelConfig
from actors.sglang_config import READINESS_PATH, SGLangConfig, cpu_engine_argv, launch_server_argv

DEFAULT_BIND = "0.0.0.0"
_HOST, _PORT, _NCCL, _RANK, _DIST, _PYTHON = (f"\0{name}\0" for name in ("host", "port", "nccl", "rank", "dist", "py"))
_PLACEHOLDERS = {
    _HOST: "{host}",
    _PORT: "{port}",
    _NCCL: "{nccl_port}",
    _RANK: "{rank}",
    _DIST: "{master_addr}:{master_port}",
    _PYTHON: "{python}",
}
ENGINE_PORTS = {"port": "worker", "nccl_port": "worker"}
ENGINE_ACTOR = "actors.cpu_engine.engine_actor:CPUEngineActor"


def engine_command(
    sglang: SGLangConfig,
    *,
    engine: str = "sglang",
    model: ModelConfig | None = None,
    weight_version: str | None = None,
    cpu_args: tuple[str, ...] | list[str] = (),
    bind: str = DEFAULT_BIND,
) -> str:
    """The command template (launcher placeholders, other braces escaped) of one engine worker.

    ``engine="cpu"``: the CPU engine (tp_size 1, one node) with ``model`` (its built-in model) or the config's
    Hugging Face ``model_path`` (which must be at the same path on every host)."""
    if engine == "cpu":
        argv = cpu_argv(sglang, model=model, weight_version=weight_version, cpu_args=cpu_args, host=_bind(bind),
                        port=_PORT, python=_PYTHON)  # fmt: skip
    elif engine == "sglang":
        if sglang.tp_size % sglang.nnodes:
            raise ValueError(f"tp_size={sglang.tp_size} must be a multiple of nnodes={sglang.nnodes} (GPUs per node)")
        multi = sglang.nnodes > 1
        update = {"host": _bind(bind), "port": _PORT, "nccl_port": _NCCL, "base_gpu_id": 0}
        update |= {"node_rank": _RANK, "dist_init_addr": _DIST} if multi else {"node_rank": 0, "dist_init_addr": None}
        argv = launch_server_argv(sglang.model_copy(update=update), python=_PYTHON)  # not validated: placeholders
    else:
        raise ValueError(f"engine must be 'cpu' or 'sglang', got {engine!r}")
    return " ".join(_PLACEHOLDERS.get(arg) or _escape(arg) for arg in argv)


def cpu_argv(
    sglang: SGLangConfig, *, model: ModelConfig | None, weight_version: str | None,
    cpu_args: tuple[str, ...] | list[str], host: str, port: str | int, python: str,
) -> list[str]:  # fmt: skip
    """``python -m actors.cpu_engine`` and its flags for one CPU engine of the pool."""
    if sglang.nnodes != 1:
        raise ValueError(f"nnodes={sglang.nnodes}: the CPU engine runs on one node")
    argv = cpu_engine_argv(sglang.model_copy(update={"host": host, "port": port}), model_config=model, python=python)
    if weight_version is not None:
        argv += ["--weight-version", weight_version]
    return argv + list(cpu_args)


def _bind(bind: str) -> str:
    return _HOST if bind == "{host}" else bind


def _escape(arg: str) -> str:
    if any(sentinel in arg for sentinel in _PLACEHOLDERS):  # only whole arguments are launcher values
        raise ValueError(f"argument {arg!r} mixes a launcher value with text")
    return shlex.quote(arg).replace("{", "{{").replace("}", "}}")


# tp_size GPUs on one host: the plan picks them and sets CUDA_VISIBLE_DEVICES, so --base-gpu-id is 0 and a
# template's base_gpu_id becomes the pool's min_gpu_id. nnodes > 1: one worker per node (tp_size / nnodes GPUs each,
# SPREAD), --node-rank and --dist-init-addr from node 0's host and the cell's port, as SGLang's multi-node launch;
# only node 0 serves HTTP, so the others are not probed and the controller waits for node 0's /health_generate.
# The HTTP server listens on every interface by default (the router and trainer reach it at the host's address,
# the launcher probes it on loopback); bind="{host}" narrows it, and then the pool needs a probe that reaches it.
def engine_worker(
    sglang: SGLangConfig,
    *,
    engine: str = "sglang",
    ready_deadline_s: float = 600.0,
    gpus: float | None = None,
    env: dict[str, str] | None = None,
    as_actor: bool = False,
    **command: Any,
) -> dict[str, Any]:
    """The ``[pools.worker]`` table of one engine worker (one node of an engine). ``gpus``: per worker (default
    ``tp_size / nnodes`` for SGLang, 0 for the CPU engine; a fraction < 1 when colocated with a trainer).
    ``as_actor``: the CPU engine as a ``serve`` worker of :data:`ENGINE_ACTOR` (``command``'s ``model``,
    ``weight_version``, ``cpu_args`` and ``bind`` as for the command)."""
    if as_actor:
        return engine_actor_worker(sglang, engine=engine, ready_deadline_s=ready_deadline_s, gpus=gpus, env=env,
                                   **command)  # fmt: skip
    per_node = sglang.tp_size // sglang.nnodes
    ready = (
        {"kind": "http", "port": "port", "path": READINESS_PATH, "deadline_s": ready_deadline_s}
        if sglang.nnodes == 1
        else {"kind": "none"}
    )
    return {
        "kind": "command",
        "command": engine_command(sglang, engine=engine, **command),
        "ports": dict(ENGINE_PORTS),
        "ready": ready,
        "gpus": gpus if gpus is not None else (0 if engine == "cpu" else per_node),
        "env": dict(env or {}),
        "metrics_port": "port",  # SGLang (--enable-metrics) and the CPU engine serve /metrics on their HTTP port
    }


# as_actor=True: a serve pool of ENGINE_ACTOR with the same flags, the HTTP port one the actor binds (--port 0)
# and reports; the launcher still places, watches and restarts them, and the controller gets their handles for
# weight sync over collective refs (actors.inference.provider_engines).
def engine_actor_worker(
    sglang: SGLangConfig,
    *,
    engine: str = "cpu",
    ready_deadline_s: float = 600.0,
    gpus: float | None = None,
    env: dict[str, str] | None = None,
    model: ModelConfig | None = None,
    weight_version: str | None = None,
    cpu_args: tuple[str, ...] | list[str] = (),
    bind: str = DEFAULT_BIND,
) -> dict[str, Any]:
    """The ``[pools.worker]`` table of one CPU engine as an actor (see the comment above)."""
    if engine != "cpu":
        raise ValueError(f"engine={engine!r}: only the CPU engine runs as an actor (SGLang is its own process)")
    if bind == "{host}":
        raise ValueError("bind='{host}': an actor's kwargs take no launcher values; bind 0.0.0.0 or an address")
    argv = cpu_argv(sglang, model=model, weight_version=weight_version, cpu_args=cpu_args, host=bind, port=0,
                    python="python")[3:]  # fmt: skip
    return {
        "kind": "serve",
        "actor_class": ENGINE_ACTOR,
        "kwargs": {"argv": argv},
        "gpus": gpus if gpus is not None else 0,
        "env": dict(env or {}),
        "ready_deadline_s": ready_deadline_s,
        "attach_deadline_s": ready_deadline_s,
    }


def engine_pool(
    pool_id: str,
    cells: int,
    sglang: SGLangConfig,
    *,
    strategy: str | None = None,
    hosts: list[str] | None = None,
    colocate_with: str | None = None,
    **worker: Any,
) -> dict[str, Any]:
    """The ``[[pools]]`` table of ``cells`` engines (one cell per engine, ``nnodes`` workers per cell)."""
    pool: dict[str, Any] = {
        "id": pool_id,
        "cells": cells,
        "workers_per_cell": sglang.nnodes,
        "strategy": strategy or ("SPREAD" if sglang.nnodes > 1 else "PACK"),
        "worker": engine_worker(sglang, **worker),
    }
    if sglang.base_gpu_id:
        pool["min_gpu_id"] = sglang.base_gpu_id
    if hosts is not None:
        pool["hosts"] = list(hosts)
    if colocate_with is not None:
        pool["colocate_with"] = colocate_with
    return pool
