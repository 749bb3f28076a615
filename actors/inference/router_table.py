"""The router's ``[[pools]]`` table, and the launcher pool expander that gives a controller one by default.

It imports neither the controller nor torch: the launcher loads it while reading hosts.toml."""

from __future__ import annotations

import shlex
from typing import Any

from pydantic import ValidationError

from actors.inference.router_settings import RouterSettings
from actors.router import RouterProcess
from launcher.config.pool_expanders import LAUNCHER_HOST

_PORT, _PROMETHEUS = 1, 2  # sentinels replaced by the launcher's placeholders
ROUTER_PORTS = {"port": "worker", "prometheus_port": "worker"}
ROUTER_POOL_SUFFIX = "-router"


def router_command(settings: RouterSettings | None = None, *, bind: str = "0.0.0.0") -> str:
    """The command template of a router worker (``{python}``, ``{port}``, ``{prometheus_port}``)."""
    settings = settings or RouterSettings(host=bind)
    process = RouterProcess(
        host=bind, port=_PORT, prometheus_port=_PROMETHEUS, policy=settings.policy,
        health_check_interval_s=settings.health_check_interval_s,
        health_failure_threshold=settings.health_failure_threshold,
        worker_startup_timeout_s=settings.worker_startup_timeout_s, log_level=settings.log_level,
        extra_args=settings.extra_args, python="{python}",
    )  # fmt: skip
    argv = process.argv()
    out = []
    for before, arg in zip(["", *argv], argv, strict=False):
        if before in ("--port", "--prometheus-port"):
            out.append("{port}" if before == "--port" else "{prometheus_port}")
        elif arg == "{python}":
            out.append(arg)
        else:
            out.append(shlex.quote(arg).replace("{", "{{").replace("}", "}}"))
    return " ".join(out)


def router_pool(
    pool_id: str = "router", settings: RouterSettings | None = None, *, hosts: list[str] | None = None
) -> dict[str, Any]:
    """The ``[[pools]]`` table of one router (one cell, one command worker, no GPU)."""
    start_s = settings.start_timeout_s if settings else RouterSettings.model_fields["start_timeout_s"].default
    pool: dict[str, Any] = {
        "id": pool_id,
        "cells": 1,
        "worker": {
            "kind": "command",
            "command": router_command(settings),
            "ports": dict(ROUTER_PORTS),
            "ready": {"kind": "http", "port": "port", "path": "/liveness", "deadline_s": start_s},
            "gpus": 0,
        },
    }
    if hosts is not None:
        pool["hosts"] = list(hosts)
    return pool


# Registered in pyproject.toml (entry-point group miles.pool_expanders). A controller pool with plan_kwargs =
# ["provider_api"] gets a companion pool {pool_id}-router on the built-in host "launcher" and router_pool naming it,
# unless its kwargs say: router_pool = "<id>" (that pool of hosts.toml), false (the controller runs the router
# itself), or true/absent (this default; true without the provider API is refused). A router pool serves one
# controller and a controller serves every cell of its engine_pool, so several controller cells need router_pool =
# false and a controller pool with an engine pool has one cell (both refused at plan time).
def expand_controller_pool(pool: dict[str, Any]) -> list[dict[str, Any]]:
    """A controller pool's tables: itself, and its default router pool on the launcher's host (rules above).

    Raises ValueError (the launcher names the pool and this expander) for a choice that cannot work.
    """
    worker = pool.get("worker")
    kwargs = worker.get("kwargs", {}) if isinstance(worker, dict) else None
    if not isinstance(kwargs, dict) or not isinstance(pool.get("id"), str):
        return [pool]  # not a table this expander can read: hosts.toml validation reports what is wrong
    _check_engine_pool_cells(pool, kwargs.get("engine_pool"))
    choice = kwargs.get("router_pool")
    with_api = "provider_api" in (worker.get("plan_kwargs") or ())
    if choice is False or (choice is None and not with_api) or isinstance(choice, str):
        _check_one_cell(pool, choice)
        return [pool]
    if choice not in (None, True):
        raise ValueError(f"kwargs.router_pool must be a pool id, true or false, got {choice!r}")
    if not with_api:
        raise ValueError(
            "router_pool = true places the router on the launcher's host, which the controller reaches through the "
            "launcher's provider API: add plan_kwargs = ['provider_api'] to the pool's worker, or drop router_pool"
        )
    _check_one_cell(pool, True)
    router = kwargs.get("router", {})
    if not isinstance(router, dict):
        raise ValueError(f"kwargs.router must be a table of RouterSettings fields, got {router!r}")
    try:
        settings = RouterSettings(**router)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in exc.errors())
        raise ValueError(f"kwargs.router (RouterSettings): {problems}") from None
    router_id = pool["id"] + ROUTER_POOL_SUFFIX
    controller = {**pool, "worker": {**worker, "kwargs": {**kwargs, "router_pool": router_id}}}
    return [controller, router_pool(router_id, settings, hosts=[LAUNCHER_HOST])]


def _check_engine_pool_cells(pool: dict[str, Any], engine_pool: Any) -> None:
    """A controller serves every cell of its engine pool (controller.py ``_adopt_pool``): one controller per pool."""
    cells = pool.get("cells", 1)
    if engine_pool is None or not isinstance(cells, int) or cells <= 1:
        return
    raise ValueError(
        f"cells = {cells} with engine_pool = {engine_pool!r}: a controller serves every cell of its engine pool, so "
        f"each of the {cells} controller cells would adopt (and restart) the same engines of pool {engine_pool!r}. "
        f"Set cells = 1 (the engine pool's `cells` sets the number of engines); for several inference servers, give "
        "each its own engine pool and its own controller pool naming it"
    )


def _check_one_cell(pool: dict[str, Any], choice: Any) -> None:
    """A router pool has one router: one controller may adopt it, not one per cell of a controller pool."""
    cells = pool.get("cells", 1)
    if choice in (None, False) or not isinstance(cells, int) or cells <= 1:
        return
    raise ValueError(
        f"cells = {cells}: each controller cell would adopt (and restart) the same router pool. Set "
        "router_pool = false in the pool's kwargs to give each controller its own router, run beside it, or make "
        "one controller pool (cells = 1) per router"
    )
