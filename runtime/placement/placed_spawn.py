"""Spawning onto any host of a launch: a lease from the launch's cluster ledger, the actor process started there by
the host's agent, and the actor constructed from here as a local spawn constructs it (this process holds its token)."""

from __future__ import annotations

import logging
from typing import Any

from runtime.actor.call_store import StoreLimits
from runtime.caller.handle import ActorHandle
from runtime.core.control_auth import SpawnTicket
from runtime.placement import lease_owner
from runtime.placement.placed_process import PlacedProcess
from runtime.placement.placement_api import call
from runtime.placement.placement_types import Grant, ResourceRequest, StartSpec
from runtime.processes.construction import attach_worker_async
from transport.security import CurveDir

log = logging.getLogger(__name__)


async def spawn_placed_async(
    actor_class: type | str,
    request: ResourceRequest,
    *,
    lease: Grant | None = None,
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
    """Reserve ``request`` on the launch's hosts (or take ``lease``, reserved already), start the actor process there
    and construct the actor in it; the handle's ``kill()`` releases the lease. PlacementRefused (nothing started)
    when nothing fits."""
    me = lease_owner.owner()
    lease_owner.keep_renewing()
    grant = lease or await call("reserve", request=request, label=label, owner=me, detached=detached)
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
            deadline_s=deadline_s, host=started.host, curve_dir=curve_dir, watch=process, owner=process,
        )  # fmt: skip
    except BaseException:
        try:
            await call("release", lease_id=grant.lease_id, owner=me)
        except Exception as exc:  # the launch is gone: so is what it started
            log.warning("releasing lease %s of %s: %s", grant.lease_id, label, exc)
        raise
    handle.connection.exit_watched = True  # its exit comes from the launcher, with how it ended: not the link watch
    process.when_exited(lambda code: handle.mark_dead(process.exit_report(code)))
    return handle
