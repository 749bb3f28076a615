"""Spawning onto any host of a launch: a lease from the launch's cluster ledger, the actor process started there by
the host's agent, and the actor constructed from here as a local spawn constructs it (this process holds its token)."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from typing import Any

from runtime.actor.call_store import StoreLimits
from runtime.caller.handle import ActorHandle
from runtime.core.control_auth import SpawnTicket
from runtime.placement.placed_process import PlacedProcess
from runtime.placement.placement_api import PlacementUnavailable, call
from runtime.placement.placement_types import ResourceRequest, StartSpec
from runtime.processes.construction import attach_worker_async
from transport.security import CurveDir

log = logging.getLogger(__name__)

RENEW_S = 1.0  # this process tells the launch it is alive this often while it holds leases
_owner: list[str] = []
_renewing: list[asyncio.Task[None]] = []


def owner() -> str:
    """This process as the owner of its leases: host and pid, and a secret only it knows (proves its releases)."""
    if not _owner:
        _owner.append(f"{socket.gethostname()}:{os.getpid()}/{secrets.token_hex(16)}")
    return _owner[0]


async def spawn_placed_async(
    actor_class: type | str,
    request: ResourceRequest,
    *,
    label: str,
    kwargs: dict[str, Any] | None,
    name: str | None,
    env: dict[str, str] | None,
    cwd: str | None,
    concurrency_groups: dict[str, int] | None,
    max_concurrency: int | None,
    limits: StoreLimits | None,
    deadline_s: float,
    curve_dir: CurveDir,
    metrics: bool,
    detached: bool,
) -> ActorHandle:
    """Reserve ``request`` on the launch's hosts, start the actor process there and construct the actor in it; the
    handle's ``kill()`` releases the lease. PlacementRefused (nothing started) when nothing fits."""
    me = owner()
    _keep_renewing()
    grant = await call("reserve", request=request, label=label, owner=me, detached=detached)
    try:
        ticket = SpawnTicket.new()
        spec = StartSpec(
            label=label, ticket_line=ticket.line(), env=env or {}, cwd=cwd, metrics=metrics,
            ready_deadline_s=deadline_s,
        )  # fmt: skip
        started = await call("start", lease_id=grant.lease_id, owner=me, spec=spec)
        process = PlacedProcess(started, label=label, owner=me)
        handle = await attach_worker_async(
            started.endpoint, actor_class, ticket=ticket, kwargs=kwargs, name=name,
            concurrency_groups=concurrency_groups, max_concurrency=max_concurrency, limits=limits,
            deadline_s=deadline_s, host=started.host, curve_dir=curve_dir, watch=process,
        )  # fmt: skip
    except BaseException:
        try:
            await call("release", lease_id=grant.lease_id, owner=me)
        except Exception as exc:  # the launch is gone: so is what it started
            log.warning("releasing lease %s of %s: %s", grant.lease_id, label, exc)
        raise
    handle.process = process
    process.when_exited(lambda code: handle.mark_dead(process.exit_report(code)))
    return handle


def _keep_renewing() -> None:
    if not _renewing or _renewing[0].done():
        _renewing[:] = [asyncio.ensure_future(_renew())]


async def _renew() -> None:
    """Tell the launch every second that this process lives: when it stops, the launch stops its actors."""
    while True:
        try:
            await call("renew", owner=owner())
        except PlacementUnavailable as exc:
            log.debug("renewing this process's leases: %s", exc)
        await asyncio.sleep(RENEW_S)
