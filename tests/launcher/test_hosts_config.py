"""hosts.toml validation: errors name the file, line, host/pool and field; the example parses and plans."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.config.hosts_config import load_config, parse_config
from launcher.config.placement import plan_placement
from launcher.config.specs import CommandWorkerSpec, ServeWorkerSpec
from launcher.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]

BASE = """
[[hosts]]
name = "a"
address = "10.0.0.1"
gpus = 2
workdir = "/tmp/a"

[[hosts]]
name = "b"
address = "10.0.0.2"
gpus = [4, 5]
workdir = "/tmp/b"
ssh = { user = "me", port = 2222, key_file = "keys/id" }

[job]
entrypoint = "actors.demo:main"
"""


def _error(text: str, tmp_path: Path) -> str:
    path = tmp_path / "hosts.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return str(info.value)


def test_example_parses_and_plans() -> None:
    config = load_config(REPO / "hosts.example.toml")
    assert config.job.entrypoint == "actors.demo:main"
    # The demo records its dashboard (README "The run dashboard"): its two pools on the built-in host "launcher".
    assert [(h.name, h.provider) for h in config.hosts] == [("local", "local"), ("launcher", "local")]
    assert Path(config.hosts[0].python).is_absolute()
    plan = plan_placement(config.hosts, config.pools)
    assert [c.cell_id for c in plan.cells()] == ["trainer-0", "inference-0", "rollout-0", "dashboard-0",
                                                 "dashboard-server-0"]  # fmt: skip


def test_valid_config_models_are_frozen(tmp_path: Path) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text(BASE)
    config = load_config(path)
    a, b = config.hosts
    assert a.gpu_ids == (0, 1) and b.gpu_ids == (4, 5)
    assert b.ssh.port == 2222 and b.ssh.key_file == tmp_path / "keys" / "id"
    assert a.ssh.port == 22 and a.provider == "ssh"
    assert config.launcher.workdir == tmp_path / "runs" / "miles-launch"
    with pytest.raises(Exception, match="frozen"):
        a.address = "x"  # type: ignore[misc]


def test_error_names_file_line_host_and_field(tmp_path: Path) -> None:
    message = _error(BASE.replace("port = 2222", "port = 99999"), tmp_path)
    assert "hosts.toml:13" in message
    assert "host 'b' field 'ssh.port'" in message
    message = _error(BASE.replace("gpus = [4, 5]", "gpus = [4, 4]"), tmp_path)
    assert "host 'b' field 'gpus'" in message and "unique" in message


def test_unknown_field_is_rejected(tmp_path: Path) -> None:
    message = _error(BASE.replace("gpus = 2", "gpus = 2\ngpu_count = 3"), tmp_path)
    assert "host 'a' field 'gpu_count'" in message and "unknown key 'gpu_count'" in message


def test_missing_field(tmp_path: Path) -> None:
    message = _error(BASE.replace('workdir = "/tmp/a"\n', ""), tmp_path)
    assert "host 'a' field 'workdir'" in message and "Field required" in message


def test_entrypoint_must_be_module_function(tmp_path: Path) -> None:
    message = _error(BASE.replace("actors.demo:main", "actors.demo.main"), tmp_path)
    assert "field 'job.entrypoint'" in message and "module:function" in message
    message = _error(BASE.replace('entrypoint = "actors.demo:main"', 'entrypoint = "a:b"\ncommand = ["x"]'), tmp_path)
    assert "exactly one" in message


def test_cuda_visible_devices_in_env_is_refused(tmp_path: Path) -> None:
    text = BASE.replace('workdir = "/tmp/a"', 'workdir = "/tmp/a"\nenv = { CUDA_VISIBLE_DEVICES = "1" }')
    message = _error(text, tmp_path)
    assert "host 'a' field 'env'" in message and "gpus = [ids]" in message
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES"):
        ServeWorkerSpec(actor_class="a.b:C", env={"CUDA_VISIBLE_DEVICES": "0"})


def test_duplicate_hosts_and_bad_pool_refs(tmp_path: Path) -> None:
    assert "duplicate host names: ['a']" in _error(BASE.replace('name = "b"', 'name = "a"'), tmp_path)
    pools = '\n[[pools]]\nid = "p"\nhosts = ["zz"]\nworker = { kind = "serve", actor_class = "m:C" }\n'
    assert "unknown host 'zz'" in _error(BASE + pools, tmp_path)


def test_pool_worker_errors_name_the_pool(tmp_path: Path) -> None:
    pools = '\n[[pools]]\nid = "rollout"\nworker = { kind = "command", command = "run {nope}" }\n'
    message = _error(BASE + pools, tmp_path)
    assert "pool 'rollout'" in message and "{nope}" in message
    pools = '\n[[pools]]\nid = "rollout"\nworker = { kind = "serve", actor_class = "m:C", gpus = 1.5 }\n'
    assert "whole number" in _error(BASE + pools, tmp_path)


def test_local_provider_needs_local_address(tmp_path: Path) -> None:
    message = _error(BASE.replace('address = "10.0.0.1"', 'address = "10.0.0.1"\nprovider = "local"'), tmp_path)
    assert "host 'a'" in message and "provider 'local'" in message


def test_host_defaults_merge() -> None:
    text = """
[host_defaults]
python = "/opt/py"
workdir = "/w"
env = { A = "1" }
[[hosts]]
name = "a"
address = "x"
env = { B = "2" }
[job]
command = ["true"]
"""
    config = parse_config(text)
    assert config.hosts[0].python == "/opt/py" and config.hosts[0].env == {"A": "1", "B": "2"}


def test_not_toml() -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        parse_config("[[hosts]\n")


def test_command_spec_template_and_ports() -> None:
    spec = CommandWorkerSpec(
        command="{python} -m sglang.launch_server --port {port} --nccl-port {nccl_port} --dist {master_addr}",
        ports={"port": "worker", "nccl_port": "cell"},
        ready={"kind": "http", "port": "port", "path": "/health"},
    )
    assert spec.port_names["nccl_port"].value == "cell"
    with pytest.raises(ValueError, match="not a declared port"):
        CommandWorkerSpec(command="x {port}", ready={"kind": "tcp", "port": "other"})


def test_ssh_workdir_must_be_absolute(tmp_path: Path) -> None:
    message = _error(BASE.replace('workdir = "/tmp/a"', 'workdir = "rel/a"'), tmp_path)
    assert "hosts.toml:2: host 'a': workdir of an ssh host must be an absolute path on that host" in message


def test_security_and_metrics_settings(tmp_path: Path) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text(BASE)
    config = load_config(path)
    assert config.launcher.curve is True and config.launcher.metrics_sd_port == 0  # secure and discoverable
    assert config.job.label == "actors.demo:main"
    path.write_text(
        BASE + 'name = "grpo-7b"\n\n[launcher]\ncurve = false\nallow_open_binds_without_curve = true\n'
        "metrics_sd_port = 9400\n"
    )
    config = load_config(path)
    assert config.launcher.curve is False and config.launcher.metrics_sd_port == 9400
    assert config.job.label == "grpo-7b"
    message = _error(BASE + "\n[launcher]\ncurve = 3\n", tmp_path)
    assert "launcher" in message and "curve" in message
    message = _error(BASE + "\n[launcher]\nmetrics_sd_port = 65536\n", tmp_path)
    assert "metrics_sd_port" in message
    command = BASE.replace('entrypoint = "actors.demo:main"', 'command = ["/opt/bin/train.sh", "--fast"]')
    path.write_text(command)
    assert load_config(path).job.label == "train.sh"


def test_command_spec_metrics_port_must_be_declared() -> None:
    spec = CommandWorkerSpec(command="x --port {port} --metrics {mport}", ports={"port": "worker", "mport": "worker"})
    assert spec.model_copy(update={"metrics_port": "mport"}).metrics_port == "mport"
    with pytest.raises(ValueError, match="metrics_port 'other' is not a declared port"):
        CommandWorkerSpec(command="x {port}", metrics_port="other")
