"""``[dashboard]`` in hosts.toml: the collector and the dashboard's web server start with the launch."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from actors.dashboard.recorder import ENV_VAR

COLLECTOR_POOL = "dashboard"
SERVER_POOL = "dashboard-server"
COLLECTOR_NAME = f"{COLLECTOR_POOL}-0-0"
FIELDS = {"enabled": bool, "run_dir": str, "bind": str}


# Registered in pyproject.toml (entry-point group miles.sections): the table becomes two pools on the built-in
# host "launcher": the collector, and `python -m actors.dashboard` on a free port (ready when /api/run answers,
# its URL said on the console); every host's processes get MILES_DASHBOARD naming the collector, which the rollout
# executor and the trainer record to. enabled = false, or no table, changes nothing.
def expand_dashboard_section(table: dict[str, Any], data: dict[str, Any], base: Path) -> dict[str, Any]:
    """hosts.toml's tables with the dashboard's pools and env when ``table`` says ``enabled = true``."""
    for key, value in table.items():
        if key not in FIELDS:
            raise ValueError(f"unknown field {key!r}; fields: {', '.join(FIELDS)}")
        if not isinstance(value, FIELDS[key]):
            raise ValueError(f"field {key!r} must be a {FIELDS[key].__name__}, got {value!r}")
    if not table.get("enabled", False):
        return data
    run_dir = Path(table.get("run_dir", "runs/dashboard")).expanduser()
    run_dir = run_dir if run_dir.is_absolute() else base / run_dir
    bind = table.get("bind", "127.0.0.1")
    pools = list(data.get("pools") or [])
    taken = {pool.get("id") for pool in pools if isinstance(pool, dict)}
    for pool_id in (COLLECTOR_POOL, SERVER_POOL):
        if pool_id in taken:
            raise ValueError(f"enabled = true adds pool {pool_id!r}, which hosts.toml already has: rename that pool")
    literal = [shlex.quote(str(run_dir)), shlex.quote(bind)]
    path, address = (text.replace("{", "{{").replace("}", "}}") for text in literal)  # not template fields
    command = f"{{python}} -m actors.dashboard {path} --port {{port}} --host {address} --create"
    pools.append({"id": COLLECTOR_POOL, "cells": 1, "hosts": ["launcher"], "worker": {
        "kind": "serve", "actor_class": "actors.dashboard.collector:DashboardCollector", "gpus": 0,
        "kwargs": {"run_dir": str(run_dir)}}})  # fmt: skip
    pools.append({"id": SERVER_POOL, "cells": 1, "hosts": ["launcher"], "worker": {
        "kind": "command", "command": command, "gpus": 0,
        "ports": {"port": "worker"}, "ready": {"kind": "http", "port": "port", "path": "/api/run", "deadline_s": 60},
        "announce": f"dashboard: http://{{host}}:{{port}}/ (run {path}; `miles-dashboard {path}` serves it later)",
    }})  # fmt: skip
    hosts = [{**host, "env": {ENV_VAR: COLLECTOR_NAME, **(host.get("env") or {})}} if isinstance(host, dict) else host
             for host in data.get("hosts") or []]  # fmt: skip
    return {**data, "pools": pools, "hosts": hosts}
