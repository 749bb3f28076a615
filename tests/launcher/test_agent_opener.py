"""Which opener starts each host's agent (hosts.toml ``provider``): a child process, an SSH channel or an srun step;
and the error for a provider no opener serves. No process is started here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import toml_text
from launch_helpers import PYTHON, local_host

from launcher.config.hosts_config import ClusterConfig, load_config
from launcher.errors import ConfigError
from launcher.hosts.agent_opener import AgentOpeners
from launcher.hosts.agent_wiring import AgentWiring
from launcher.hosts.local_opener import LocalOpener
from launcher.hosts.slurm_allocation import Allocation, SlurmNode
from launcher.hosts.slurm_commands import SlurmError
from launcher.hosts.srun_opener import SrunOpener
from launcher.hosts.ssh_opener import SshOpener
from launcher.launch.worker_provider import WorkerProvider

JOB = {"entrypoint": "launch_jobs:exit_code"}
COUNTER = {"kind": "serve", "actor_class": "launch_actors:Counter"}


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "hosts.toml"
    path.write_text(toml_text.dump({"launcher": {"workdir": str(tmp_path / "run")}, "job": JOB, **data}))
    return path


def openers_of(config: ClusterConfig, reach_back: dict[str, str] | None = None) -> AgentOpeners:
    reach_back = {} if reach_back is None else reach_back
    wiring = AgentWiring(config.launcher, lambda _host, _event: None, reach_back, lambda _message, _level=0: None)
    return AgentOpeners(config, wiring)


def test_local_and_ssh_hosts_of_one_file_each_get_their_own_opener(tmp_path: Path) -> None:
    ssh = {"address": "10.200.0.2", "provider": "ssh", "python": PYTHON, "workdir": "/tmp/miles"}
    hosts = [local_host("here", tmp_path / "here"), {"name": "a", **ssh}, {"name": "b", **ssh}]
    config = load_config(write(tmp_path, {"hosts": hosts}))
    openers = openers_of(config)
    here, a, b = (openers.for_host(host) for host in config.hosts)
    assert isinstance(here, LocalOpener) and isinstance(a, SshOpener)
    assert a is b  # one opener per kind of host, not per host


def test_slurm_nodes_get_srun_steps_with_the_cluster_srun_args_and_the_launcher_host_runs_locally(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, {
        "cluster": {"provider": "slurm", "srun_args": ["--qos=high"]},
        "host_defaults": {"python": PYTHON, "workdir": "/scratch/miles"},
        "pools": [{"id": "c", "worker": COUNTER}, {"id": "router", "hosts": ["launcher"], "worker": COUNTER}],
    })  # fmt: skip
    nodes = (SlurmNode("gpu-01", "10.1.0.1", (0,)), SlurmNode("gpu-02", "10.1.0.2", (0,)))
    config = load_config(path, allocation=Allocation("7", nodes))
    openers = openers_of(config)
    chosen = {host.name: openers.for_host(host) for host in config.hosts}
    assert sorted(chosen) == ["gpu-01", "gpu-02", "launcher"]
    assert isinstance(chosen["gpu-01"], SrunOpener) and chosen["gpu-01"] is chosen["gpu-02"]
    assert chosen["gpu-01"].srun_args == ("--qos=high",)
    assert isinstance(chosen["launcher"], LocalOpener)


def test_an_unknown_provider_in_hosts_toml_names_the_host_and_the_fix(tmp_path: Path) -> None:
    host = {"name": "gpu7", "address": "10.200.0.7", "provider": "sshh", "workdir": "/tmp/miles"}
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, {"hosts": [host]}))
    message = str(info.value)
    assert "host 'gpu7' field 'provider': unknown provider 'sshh'" in message
    assert 'set provider = "ssh"' in message and '"local"' in message and '[cluster] provider = "slurm"' in message


def test_a_host_no_opener_serves_is_refused_before_any_agent_starts(tmp_path: Path) -> None:
    """A HostConfig built around validation (model_copy, model_construct) or a provider value without an opener."""
    config = load_config(write(tmp_path, {"hosts": [local_host("here", tmp_path / "here")]}))
    odd = config.hosts[0].model_copy(update={"name": "odd", "provider": "k8s"})
    config = config.model_copy(update={"hosts": (*config.hosts, odd)})
    for build in (openers_of, WorkerProvider):
        with pytest.raises(ConfigError, match=r"host 'odd': unknown provider 'k8s'; set provider = \"ssh\""):
            build(config)


def test_srun_opener_says_where_the_node_reaches_the_launcher_and_that_srun_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, {
        "cluster": {"provider": "slurm"},
        "host_defaults": {"python": PYTHON, "workdir": "/scratch/miles"},
        "pools": [{"id": "c", "worker": COUNTER}],
    })  # fmt: skip
    config = load_config(path, allocation=Allocation("7", (SlurmNode("node1", "127.0.0.1", ()),)))
    reach_back: dict[str, str] = {}
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun here
    with pytest.raises(SlurmError, match="'srun' is not on PATH"):
        openers_of(config, reach_back).open(config.host("node1"))
    assert reach_back == {"node1": "127.0.0.1"}  # the route to the node: what its workers reach the launcher at
