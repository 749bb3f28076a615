"""``[dashboard]`` in hosts.toml: the collector and the web server become pools on the launcher's machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.config.hosts_config import parse_config
from launcher.errors import ConfigError

BASE = """
[launcher]
workdir = "/tmp/miles-dash-test"
[[hosts]]
name = "a"
address = "127.0.0.1"
provider = "local"
gpus = 0
workdir = "/tmp/miles-dash-test/a"
env = { OMP_NUM_THREADS = "1" }
[job]
entrypoint = "actors.demo:main"
[[pools]]
id = "rollout"
[pools.worker]
kind = "serve"
actor_class = "actors.rollout.executor:RolloutExecutor"
kwargs = { reward_fn = "actors.demo.task:shaped_copy_reward", router_url = "http://x" }
"""


def test_enabled_adds_the_collector_and_the_server_on_the_launcher_host(tmp_path: Path) -> None:
    config = parse_config(BASE + '[dashboard]\nenabled = true\nrun_dir = "runs/dash"\n', source=tmp_path / "h.toml")
    collector, server = config.pool("dashboard"), config.pool("dashboard-server")
    assert tuple(collector.hosts) == ("launcher",) and tuple(server.hosts) == ("launcher",)
    assert collector.worker.kwargs == {"run_dir": str(tmp_path / "runs/dash")}
    expected = f"{{python}} -m actors.dashboard {tmp_path}/runs/dash --port {{port}} --host 127.0.0.1 --create"
    assert server.worker.command == expected and server.worker.ready.path == "/api/run"
    assert server.worker.announce.startswith("dashboard: http://{host}:{port}/")
    hosts = {host.name: host for host in config.hosts}
    assert hosts["a"].env == {"MILES_DASHBOARD": "dashboard-0-0", "OMP_NUM_THREADS": "1"}
    assert tuple(config.pool("rollout").hosts) == ("a",)  # the file's own pools stay on the file's hosts


def test_disabled_or_absent_changes_nothing(tmp_path: Path) -> None:
    off = parse_config(BASE + "[dashboard]\nenabled = false\n", source=tmp_path / "h.toml")
    assert [pool.id for pool in off.pools] == ["rollout"] and "MILES_DASHBOARD" not in off.hosts[0].env


@pytest.mark.parametrize("table, message", [
    ("enabled = true\nport = 80", "[dashboard]: unknown field 'port'; fields: enabled, run_dir, bind"),
    ("enabled = 'yes'", "[dashboard]: field 'enabled' must be a bool, got 'yes'"),
])  # fmt: skip
def test_bad_fields_name_the_section(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"actors\.dashboard\.launch_section") as error:
        parse_config(BASE + f"[dashboard]\n{table}\n", source=tmp_path / "h.toml")
    assert message in str(error.value)
