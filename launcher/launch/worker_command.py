"""Turn a worker's spec + placement + allocated ports into the agent's spawn command (argv, env, readiness)."""

from __future__ import annotations

import shlex
from typing import Any

from launcher.agent import agent_protocol as proto
from launcher.agent.agent_commands import Spawn
from launcher.config.hosts_config import HostConfig
from launcher.config.placement import WorkerPlacement
from launcher.config.specs import CommandWorkerSpec, PortScope, ServeWorkerSpec
from runtime.internals import NAME_SERVICE_ENV
from runtime.placement import PLACEMENT_API_ENV
from transport import session_secret
from transport.security import CURVE_DIR_ENV
from transport.session_secret import SECRET_ENV


def plan_env(
    host: HostConfig, placement: WorkerPlacement, *, master_addr: str, master_port: int | None
) -> dict[str, str]:
    """Variables every worker gets from the plan (GPU ids, ranks, cell identity)."""
    env = {
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, placement.gpu_ids)),
        "LOCAL_RANK": str(placement.local_rank),
        "RANK": str(placement.worker_index),
        "WORLD_SIZE": str(placement.world_size),
        "MASTER_ADDR": master_addr,
        "MILES_POOL_ID": placement.pool_id,
        "MILES_CELL_ID": placement.cell_id,
        "MILES_WORKER_ID": placement.worker_id,
        "MILES_HOST": host.name,
        "MILES_GPU_SHARE": f"{placement.gpu_share:g}",
        "PYTHONUNBUFFERED": "1",
    }
    if master_port is not None:
        env["MASTER_PORT"] = str(master_port)
    return env


def bind_address(host: HostConfig) -> str:
    """Where a serve worker on ``host`` listens (``HostConfig.actor_bind_host``): loopback for local hosts, every
    interface for SSH hosts. Open binds without CURVE are refused at parse time unless hosts.toml opts in
    (``hosts_config.check_open_binds``)."""
    return host.actor_bind_host


def build_spawn(
    host: HostConfig,
    spec: ServeWorkerSpec | CommandWorkerSpec,
    placement: WorkerPlacement,
    *,
    ports: dict[str, int],
    master_addr: str,
    master_port: int | None,
    stream_logs: str,
    curve_dir: str | None = None,
    name_service: str = "",
    placement_api: str = "",
) -> Spawn:
    """The agent ``spawn`` command for one worker (``ports`` holds worker and cell ports).

    ``curve_dir``: where this host's copy of the launch's CURVE keys is; None (CURVE off) sets ``MILES_CURVE_DIR``
    empty, so a value inherited from the agent's environment cannot turn CURVE on for one side only.
    ``name_service``: ``MILES_NAME_SERVICE``, the launch's name service as this host reaches it
    (``provider.name_service_env``); the launcher's value wins over any env, as the keys do. ``placement_api``:
    ``MILES_PLACEMENT_API``, the same for the launch's placement API.
    """
    env = {
        # What an actor bound on 0.0.0.0 names as its own address (e.g. in the object refs it hands out): the
        # address the launcher reaches this host at, not its hostname, which may not resolve elsewhere (or may
        # resolve to loopback). A host's `env` may override it.
        "MILES_ADVERTISE_HOST": host.reach_address,
        **host.env,
        **spec.env,
        **plan_env(host, placement, master_addr=master_addr, master_port=master_port),
        CURVE_DIR_ENV: curve_dir or "",  # the launcher's keys win over any env: both sides must agree
        NAME_SERVICE_ENV: name_service,
        **({PLACEMENT_API_ENV: placement_api} if placement_api else {}),
        SECRET_ENV: session_secret.ensure(),  # the launch's (the launcher's): pickled values travel within it
    }
    if isinstance(spec, ServeWorkerSpec):
        argv = [host.python, "-m", "runtime.worker", "--bind", f"tcp://{bind_address(host)}:{ports['port']}"]
        ready: dict[str, Any] = {
            "kind": "line",
            "prefix": proto.READY_PREFIX,
            "deadline_s": spec.ready_deadline_s,
        }
    else:
        argv = format_command(host, spec, placement, ports=ports, master_addr=master_addr, master_port=master_port)
        check = spec.ready
        ready = {"kind": check.kind, "deadline_s": check.deadline_s}
        if check.kind != "none":
            assert check.port is not None
            ready.update(port_number=ports[check.port], path=check.path, probe_host=check.probe_host)
    return Spawn(placement.worker_id, argv, env, cwd=str(host.workdir), ready=ready, stream_logs=stream_logs)


def format_command(
    host: HostConfig,
    spec: CommandWorkerSpec,
    placement: WorkerPlacement,
    *,
    ports: dict[str, int],
    master_addr: str,
    master_port: int | None,
) -> list[str]:
    """Fill the command template (values shell-quoted) and split it into argv."""
    values: dict[str, Any] = {
        "host": host.reach_address,
        "master_addr": master_addr,
        "master_port": master_port if master_port is not None else "",
        "pool_id": placement.pool_id,
        "cell_id": placement.cell_id,
        "worker_id": placement.worker_id,
        "rank": placement.worker_index,
        "world_size": placement.world_size,
        "local_rank": placement.local_rank,
        "gpu_ids": ",".join(map(str, placement.gpu_ids)),
        "num_gpus": len(placement.gpu_ids),
        "python": host.python,
        "workdir": str(host.workdir),
        **{name: ports[name] for name in spec.ports},
    }
    quoted = {key: shlex.quote(str(value)) for key, value in values.items()}
    return shlex.split(spec.command.format_map(quoted))


def port_counts(spec: ServeWorkerSpec | CommandWorkerSpec) -> tuple[list[str], list[str]]:
    """(worker-scoped port names, cell-scoped port names) of a spec."""
    names = spec.port_names
    return (
        [n for n, scope in names.items() if scope is PortScope.WORKER],
        [n for n, scope in names.items() if scope is PortScope.CELL],
    )
