"""Pool expanders (launcher/config/pool_expanders.py) and the built-in host "launcher", with expanders registered the
way a package registers them: a distribution on sys.path whose entry_points.txt names them (importlib.metadata finds it,
as it finds pyproject.toml's entry points once `pip install -e .` ran). Errors name the pool, the expander and a fix.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import toml_text
from launch_helpers import subprocess_env

from launcher.config.hosts_config import ClusterConfig, load_config
from launcher.config.placement import plan_placement
from launcher.config.pool_expanders import ENTRY_POINT_GROUP, LAUNCHER_HOST
from launcher.errors import ConfigError

EXPANDERS = '''
def with_sidecar(pool):
    """The pool with kwargs.sidecar set, and a command pool on the launcher's host."""
    sidecar = pool["id"] + "-sidecar"
    pool["worker"]["kwargs"]["sidecar"] = sidecar
    command = {"kind": "command", "command": "{python} -c pass", "ready": {"kind": "none"}}
    return [pool, {"id": sidecar, "hosts": ["launcher"], "worker": command}]


def refuses(pool):
    raise ValueError("kwargs.mode must be 'a' or 'b', got " + repr(pool["worker"]["kwargs"].get("mode")))


def forgets_the_pool(pool):
    return [{"id": "other", "worker": pool["worker"]}]


def crashes(pool):
    return pool["worker"]["kwargs"]["missing"]
'''


@pytest.fixture
def expanders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A distribution (plugin_pkg) registering one expander per actor class plugin_actors.<Name>; its path."""
    site = tmp_path / "site"
    (site / "plugin_pkg").mkdir(parents=True)
    (site / "plugin_pkg" / "__init__.py").write_text("")
    (site / "plugin_pkg" / "expanders.py").write_text(EXPANDERS)
    dist = site / "plugin_pkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-pkg\nVersion: 0.1\n")
    points = {
        "Sidecar": "plugin_pkg.expanders:with_sidecar",
        "Refuses": "plugin_pkg.expanders:refuses",
        "Forgets": "plugin_pkg.expanders:forgets_the_pool",
        "Crashes": "plugin_pkg.expanders:crashes",
        "Missing": "plugin_pkg.not_there:expand",
    }
    lines = [f"plugin_actors.{name} = {value}" for name, value in points.items()]
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n" + "\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(site))
    return site


def serve_pool(pool_id: str, actor: str, **fields: Any) -> dict[str, Any]:
    worker = {"kind": "serve", "actor_class": f"plugin_actors:{actor}", "kwargs": {"mode": "c"}}
    return {"id": pool_id, "worker": worker, **fields}


def write_config(tmp_path: Path, pools: list[dict[str, Any]], hosts: list[dict[str, Any]] | None = None) -> Path:
    hosts = hosts or [
        {"name": n, "address": f"10.0.0.{i}", "workdir": f"/w/{n}", "gpus": 0} for i, n in enumerate(["h1", "h2"])
    ]
    data = {"launcher": {"workdir": "run"}, "hosts": hosts, "job": {"entrypoint": "m:f"}, "pools": pools}
    path = tmp_path / "hosts.toml"
    path.write_text(toml_text.dump(data))
    return path


def load_error(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return str(info.value)


@pytest.mark.processes
def test_an_expander_rewrites_its_pool_and_adds_a_companion_on_the_built_in_launcher_host(
    expanders: Path, tmp_path: Path
) -> None:
    spread = {"id": "spread", "cells": 4, "strategy": "SPREAD", "worker": {"kind": "command", "command": "x {port}"}}
    path = write_config(tmp_path, [serve_pool("svc", "Sidecar", hosts=["h2"]), spread])
    config = load_config(path)
    assert [p.id for p in config.pools] == ["svc", "spread", "svc-sidecar"]  # companions after the file's pools
    assert config.pool("svc").worker.kwargs == {"mode": "c", "sidecar": "svc-sidecar"}
    host = config.host(LAUNCHER_HOST)
    assert (host.provider, host.address, host.gpu_ids, host.env) == ("local", "localhost", (), {})
    assert host.python == sys.executable and host.workdir == tmp_path / "run" / "launcher-host"
    plan = plan_placement(config.hosts, config.pools)
    assert [c.workers[0].host for c in plan.cells("svc-sidecar")] == ["launcher"]
    assert [c.workers[0].host for c in plan.cells("spread")] == ["h1", "h2", "h1", "h2"]  # never on "launcher"
    (tmp_path / "m.py").write_text("def f(ctx):\n    return 0\n")  # --dry-run imports the job and the classes
    (expanders / "plugin_actors.py").write_text(
        "class Sidecar:\n    def __init__(self, *, mode: str, sidecar: str) -> None:\n        pass\n"
    )  # its kwargs after the expander: `sidecar` was added, and the check sees it
    dry = subprocess.run(
        [sys.executable, "-m", "launcher.console.cli", str(path), "--dry-run"], capture_output=True, text=True,
        timeout=60,
        env=subprocess_env(PYTHONPATH=str(expanders)),
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert any(line.split()[:2] == ["launcher", "local"] for line in dry.stdout.splitlines()), dry.stdout
    assert any(line.split()[:2] == ["svc-sidecar-0-0", "launcher"] for line in dry.stdout.splitlines()), dry.stdout


def test_a_host_named_launcher_in_hosts_toml_is_used_as_written(expanders: Path, tmp_path: Path) -> None:
    mine = {"name": "launcher", "address": "10.0.0.9", "workdir": "/w/mine", "gpus": 1, "env": {"A": "1"}}
    hosts = [{"name": "h1", "address": "10.0.0.1", "workdir": "/w/h1"}, mine]
    config = load_config(write_config(tmp_path, [serve_pool("svc", "Sidecar")], hosts=hosts))
    assert [h.name for h in config.hosts] == ["h1", "launcher"]
    host = config.host("launcher")
    assert (host.provider, host.address, host.env, host.gpu_ids) == ("ssh", "10.0.0.9", {"A": "1"}, (0,))
    assert config.pool("svc").hosts is None  # the user's own host: placement as usual


def test_without_a_pool_naming_it_there_is_no_launcher_host(expanders: Path, tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, [serve_pool("svc", "NoExpander")]))
    assert [h.name for h in config.hosts] == ["h1", "h2"] and config.pool("svc").hosts is None
    assert isinstance(config, ClusterConfig) and config.pool("svc").worker.kwargs == {"mode": "c"}


def test_an_expander_refusing_a_pool_names_the_pool_the_expander_and_the_file(expanders: Path, tmp_path: Path) -> None:
    path = write_config(tmp_path, [serve_pool("svc", "Refuses")])
    message = load_error(path)
    assert message.startswith(f"{path}: pool 'svc': kwargs.mode must be 'a' or 'b', got 'c'"), message
    assert "plugin_pkg.expanders:refuses (entry point 'plugin_actors.Refuses'" in message
    assert f"fix the pool's table in {path}" in message


def test_an_expander_that_crashes_or_cannot_load_is_reported_with_a_fix(expanders: Path, tmp_path: Path) -> None:
    crash = load_error(write_config(tmp_path, [serve_pool("svc", "Crashes")]))
    assert "pool 'svc': KeyError: 'missing'" in crash and "plugin_pkg.expanders:crashes" in crash
    missing = load_error(write_config(tmp_path, [serve_pool("svc", "Missing")]))
    assert "pool 'svc': cannot load the pool expander plugin_pkg.not_there:expand" in missing
    assert "ModuleNotFoundError" in missing and "reinstall the package that registers it" in missing


def test_an_expander_must_return_the_pool_itself_and_fresh_companion_ids(expanders: Path, tmp_path: Path) -> None:
    forgot = load_error(write_config(tmp_path, [serve_pool("svc", "Forgets")]))
    assert "returned pools ['other']: it must return the pool itself (id 'svc') once" in forgot
    taken = {"id": "svc-sidecar", "worker": {"kind": "command", "command": "x {port}"}}
    clash = load_error(write_config(tmp_path, [serve_pool("svc", "Sidecar"), taken]))
    assert "a pool expander adds pool 'svc-sidecar', but that id is already taken" in clash
