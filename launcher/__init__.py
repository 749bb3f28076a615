"""Processes on hosts: hosts.toml, worker specs, placement, the local and SSH WorkerProviders, ``miles-launch``.

Public surface::

    from launcher import load_config, plan_placement, make_provider

    config = load_config("hosts.toml")                       # frozen pydantic models; ConfigError names the field
    plan = plan_placement(config.hosts, config.pools)         # all-or-nothing; PlacementError says what is short
    with make_provider(config, plan=plan) as provider:        # LocalProvider or SSHProvider
        provider.start_all()                                  # host agents, spawn, wait ready, attach actors
        provider.handles("rollout")[0].generate(...).result()
        provider.deaths                                       # DeathReport for every worker that died
        provider.metrics_sd_url                               # Prometheus HTTP service discovery of the workers
        provider.curve_dir                                    # this launch's CURVE keys (None: curve = false)

The CLI (``miles-launch hosts.toml``) does the same, then runs the job entrypoint with a JobContext.
Every launch is CURVE-authenticated with fresh keys shipped to the hosts (``[launcher] curve = false`` or
``--no-curve`` to opt out on trusted networks) and serves Prometheus service discovery (``metrics_sd_port``).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.cells import CellInfo, DeathReport, WorkerInfo
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
    from launcher.hosts_config import ClusterConfig, HostConfig, JobConfig, LauncherSettings, SSHConfig, load_config
    from launcher.job import CellDied, JobContext
    from launcher.local_provider import LocalProvider
    from launcher.placement import CellPlacement, PlacementPlan, WorkerPlacement, plan_placement
    from launcher.provider_base import BaseWorkerProvider
    from launcher.specs import CommandWorkerSpec, PoolSpec, ReadinessCheck, ServeWorkerSpec, Strategy
    from launcher.ssh_provider import SSHProvider, make_provider

# Imported lazily: ``python -m launcher.host_agent`` on every host must not pay for paramiko/pydantic.
_EXPORTS = {
    "AgentError": "launcher.errors",
    "BaseWorkerProvider": "launcher.provider_base",
    "CellDied": "launcher.job",
    "CellInfo": "launcher.cells",
    "CellPlacement": "launcher.placement",
    "ClusterConfig": "launcher.hosts_config",
    "CommandWorkerSpec": "launcher.specs",
    "ConfigError": "launcher.errors",
    "DeathReport": "launcher.cells",
    "HostAuthError": "launcher.errors",
    "HostCheckError": "launcher.errors",
    "HostConfig": "launcher.hosts_config",
    "HostUnreachable": "launcher.errors",
    "JobConfig": "launcher.hosts_config",
    "JobContext": "launcher.job",
    "LauncherError": "launcher.errors",
    "LauncherSettings": "launcher.hosts_config",
    "LocalProvider": "launcher.local_provider",
    "PlacementError": "launcher.errors",
    "PlacementPlan": "launcher.placement",
    "PoolSpec": "launcher.specs",
    "ReadinessCheck": "launcher.specs",
    "SSHConfig": "launcher.hosts_config",
    "SSHProvider": "launcher.ssh_provider",
    "ServeWorkerSpec": "launcher.specs",
    "Strategy": "launcher.specs",
    "WorkerInfo": "launcher.cells",
    "WorkerPlacement": "launcher.placement",
    "WorkerStartError": "launcher.errors",
    "load_config": "launcher.hosts_config",
    "make_provider": "launcher.ssh_provider",
    "plan_placement": "launcher.placement",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'launcher' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "AgentError",
    "BaseWorkerProvider",
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
    "LocalProvider",
    "PlacementError",
    "PlacementPlan",
    "PoolSpec",
    "ReadinessCheck",
    "SSHConfig",
    "SSHProvider",
    "ServeWorkerSpec",
    "Strategy",
    "WorkerInfo",
    "WorkerPlacement",
    "WorkerStartError",
    "load_config",
    "make_provider",
    "plan_placement",
]
