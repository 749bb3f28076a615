"""The job: a ``module:function`` called with a JobContext, or a command run on the launcher host."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.agent.code_cache import with_python_path
from launcher.config.hosts_config import ClusterConfig, JobConfig
from launcher.config.user_imports import import_object
from launcher.errors import ConfigError, LauncherError
from launcher.launch import provider_service
from launcher.launch.cells import CellInfo, DeathReport, WorkerInfo
from launcher.launch.code_package import local_paths
from launcher.launch.worker_provider import WorkerProvider
from runtime import ActorHandle
from runtime.internals import NAME_SERVICE_ENV, die_with_parent_preexec
from runtime.placement import PLACEMENT_API_ENV
from transport import session_secret
from transport.security import CURVE_DIR_ENV
from transport.session_secret import SECRET_ENV

#: Environment of a command job: the Prometheus HTTP service discovery URL (empty when off).
METRICS_SD_ENV = "MILES_METRICS_SD_URL"

log = logging.getLogger(__name__)


class CellDied(LauncherError):
    """Raised by ``JobContext.check_alive`` when a cell lost a worker."""


@dataclass
class JobContext:
    """What a job entrypoint gets: the pools (cells, handles, addresses), the provider and ``job.args``; also the
    Prometheus service discovery URL (``metrics_sd_url``) and this launch's CURVE keys (``curve_dir``)."""

    config: ClusterConfig
    provider: WorkerProvider
    args: dict[str, Any]

    @property
    def pool_ids(self) -> list[str]:
        """Pool ids in hosts.toml order."""
        return [pool.id for pool in self.config.pools]

    def cells(self, pool_id: str) -> list[CellInfo]:
        """Cells of a pool."""
        return self.provider.cells(pool_id)

    def handles(self, pool_id: str) -> list[Any]:
        """Actor handles of a pool (serve workers), cell by cell."""
        return self.provider.handles(pool_id)

    def addresses(self, pool_id: str) -> list[str]:
        """``host:port`` of a pool's workers."""
        return self.provider.addresses(pool_id)

    def workers(self, pool_id: str | None = None) -> list[WorkerInfo]:
        """Worker infos (host, pid, gpu ids, ports)."""
        return self.provider.worker_infos(pool_id)

    @property
    def metrics_sd_url(self) -> str | None:
        """Prometheus HTTP service discovery of this launch (``http_sd_configs`` url); None when turned off."""
        return self.provider.metrics_sd_url

    @property
    def metrics_sd_file(self) -> Path | None:
        """The same targets as a file_sd JSON file on the launcher host."""
        return self.provider.metrics_sd_file

    @property
    def curve_dir(self) -> str | None:
        """This launch's CURVE keys on the launcher host (pass as ``curve_dir=`` to runtime.connect/spawn);
        None when CURVE is off."""
        return self.provider.curve_dir

    @property
    def provider_api(self) -> ActorHandle:
        """A handle to the launch's provider API (``ctx.provider_api.cells(pool).result()``: list, start, stop,
        restart cells; see launcher.launch.provider_service)."""
        address = provider_service.address_for(self.provider.services, None)
        return provider_service.connect(address, curve_dir=self.curve_dir)

    @property
    def deaths(self) -> list[DeathReport]:
        """Workers that died while their cell was meant to run."""
        return list(self.provider.deaths)

    def check_alive(self) -> None:
        """Raise CellDied if any cell lost a worker."""
        if self.provider.deaths:
            raise CellDied("; ".join(str(d) for d in self.provider.deaths))


def resolve_entrypoint(entrypoint: str) -> Callable[..., Any]:
    """Import ``module:function``; ConfigError naming job.entrypoint if it cannot (the user's frames when the
    module raises; where it was looked for when it is not found)."""
    function = import_object(entrypoint, field="job.entrypoint")
    if not callable(function):
        raise ConfigError(f"job.entrypoint {entrypoint!r}: {function!r} is not callable")
    return function


def check_job_args(
    entrypoint: Callable[..., Any], args: Mapping[str, Any], pools: Mapping[str, Mapping[str, Any]]
) -> None:
    """Run the entrypoint's own check of ``[job.args]`` and the serve pools' kwargs (pool id -> kwargs): its
    ``check_args(args, pools)`` attribute, as ``actors.job_args.takes_settings`` sets it, so bad settings fail
    before anything starts; ConfigError."""
    check = getattr(entrypoint, "check_args", None)
    if not callable(check):
        return
    try:
        check(dict(args), pools)
    except (TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        message = str(exc)
        if type(exc) not in (TypeError, ValueError):
            message = f"{type(exc).__name__}: {message}"  # the job's own refusal (e.g. OffPolicyRefused), by name
        elif not message.startswith("job.args"):
            message = f"job.args: {message}"
        raise ConfigError(message) from None


def use_job_code(job: JobConfig) -> None:
    """Put the job's code (working dir, py_modules' parents) first on this process's ``sys.path``, in place."""
    for path in reversed(local_paths(job)):
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)


def run_job(job: JobConfig, ctx: JobContext, *, state_path: Path | None = None) -> int:
    """Run the job to completion; its exit code (an entrypoint returning None means 0)."""
    if job.entrypoint is not None:
        use_job_code(job)
        result = resolve_entrypoint(job.entrypoint)(ctx)
        if inspect.isawaitable(result):
            result = asyncio.run(_await(result))
        return result if isinstance(result, int) else 0
    assert job.command is not None
    env = {
        **os.environ,
        **job.env,
        "MILES_LAUNCH_POOLS": json.dumps({pid: ctx.addresses(pid) for pid in ctx.pool_ids}),
        "MILES_LAUNCH_ARGS": json.dumps(job.args),
        CURVE_DIR_ENV: ctx.curve_dir or "",
        SECRET_ENV: session_secret.ensure(),  # the launch's, as its workers got it (launcher.launch.worker_command)
        METRICS_SD_ENV: ctx.metrics_sd_url or "",
        NAME_SERVICE_ENV: ctx.provider.name_service_env(None),  # get_actor and named spawns use the launch's names
        provider_service.PROVIDER_API_ENV: json.dumps(provider_service.address_for(ctx.provider.services, None)),
        PLACEMENT_API_ENV: ctx.provider.services.placement_api_env(None),  # runtime.placement.nodes() etc.
    }
    if state_path is not None:
        env["MILES_LAUNCH_STATE"] = str(state_path)
    with_python_path(env, local_paths(job))
    preexec = (
        die_with_parent_preexec(sig=signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    )
    proc = subprocess.Popen(list(job.command), env=env, preexec_fn=preexec)
    try:
        return proc.wait()
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _await(awaitable: Any) -> Any:
    return await awaitable
