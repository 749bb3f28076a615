"""Processes on hosts: hosts.toml, worker specs, placement, the WorkerProvider and its agent openers, ``miles-launch``.

Public surface::

    from launcher import load_config, plan_placement, WorkerProvider

    config = load_config("hosts.toml")                       # frozen pydantic models; ConfigError names the field
    plan = plan_placement(config.hosts, config.pools)         # all-or-nothing; PlacementError says what is short
    with WorkerProvider(config, plan=plan) as provider:       # each host's agent: local, over SSH or srun
        provider.start_all()                                  # host agents, spawn, wait ready, attach actors
        provider.handles("rollout")[0].generate(...).result()
        provider.deaths                                       # DeathReport for every worker that died
        provider.metrics_sd_url                               # Prometheus HTTP service discovery of the workers
        provider.curve_dir                                    # this launch's CURVE keys (None: curve = false)

``miles-launch hosts.toml`` does the same (CURVE keys fresh per launch), then runs the job with a JobContext.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.config.hosts_config import (
        ClusterConfig,
        HostConfig,
        JobConfig,
        LauncherSettings,
        SSHConfig,
        load_config,
    )
    from launcher.config.placement import CellPlacement, PlacementPlan, WorkerPlacement, plan_placement
    from launcher.config.specs import CommandWorkerSpec, PoolSpec, ReadinessCheck, ServeWorkerSpec, Strategy
    from launcher.errors import (
        AgentError,
        ConfigError,
        HostAuthError,
        HostCheckError,
        HostUnreachable,
        LauncherError,
        PlacementError,
        WorkerStartError,
    )
    from launcher.hosts.agent_opener import AgentOpener, AgentOpeners
    from launcher.hosts.local_opener import LocalOpener
    from launcher.hosts.srun_opener import SrunOpener
    from launcher.hosts.ssh_opener import SshOpener
    from launcher.launch.cells import CellInfo, DeathReport, WorkerInfo
    from launcher.launch.job import CellDied, JobContext
    from launcher.launch.worker_provider import WorkerProvider

# Imported lazily: ``python -m launcher.agent.host_agent`` on every host must not pay for paramiko/pydantic.
_EXPORTS = {
    "AgentError": "launcher.errors",
    "AgentOpener": "launcher.hosts.agent_opener",
    "AgentOpeners": "launcher.hosts.agent_opener",
    "CellDied": "launcher.launch.job",
    "CellInfo": "launcher.launch.cells",
    "CellPlacement": "launcher.config.placement",
    "ClusterConfig": "launcher.config.hosts_config",
    "CommandWorkerSpec": "launcher.config.specs",
    "ConfigError": "launcher.errors",
    "DeathReport": "launcher.launch.cells",
    "HostAuthError": "launcher.errors",
    "HostCheckError": "launcher.errors",
    "HostConfig": "launcher.config.hosts_config",
    "HostUnreachable": "launcher.errors",
    "JobConfig": "launcher.config.hosts_config",
    "JobContext": "launcher.launch.job",
    "LauncherError": "launcher.errors",
    "LauncherSettings": "launcher.config.hosts_config",
    "LocalOpener": "launcher.hosts.local_opener",
    "PlacementError": "launcher.errors",
    "PlacementPlan": "launcher.config.placement",
    "PoolSpec": "launcher.config.specs",
    "ReadinessCheck": "launcher.config.specs",
    "SSHConfig": "launcher.config.hosts_config",
    "ServeWorkerSpec": "launcher.config.specs",
    "SrunOpener": "launcher.hosts.srun_opener",
    "SshOpener": "launcher.hosts.ssh_opener",
    "Strategy": "launcher.config.specs",
    "WorkerInfo": "launcher.launch.cells",
    "WorkerPlacement": "launcher.config.placement",
    "WorkerProvider": "launcher.launch.worker_provider",
    "WorkerStartError": "launcher.errors",
    "load_config": "launcher.config.hosts_config",
    "plan_placement": "launcher.config.placement",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'launcher' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "AgentError",
    "AgentOpener",
    "AgentOpeners",
    "CellDied",
    "CellInfo",
    "CellPlacement",
    "ClusterConfig",
    "CommandWorkerSpec",
    "ConfigError",
    "DeathReport",
    "HostAuthError",
    "HostCheckError",
    "HostConfig",
    "HostUnreachable",
    "JobConfig",
    "JobContext",
    "LauncherError",
    "LauncherSettings",
    "LocalOpener",
    "PlacementError",
    "PlacementPlan",
    "PoolSpec",
    "ReadinessCheck",
    "SSHConfig",
    "ServeWorkerSpec",
    "SrunOpener",
    "SshOpener",
    "Strategy",
    "WorkerInfo",
    "WorkerPlacement",
    "WorkerProvider",
    "WorkerStartError",
    "load_config",
    "plan_placement",
]
