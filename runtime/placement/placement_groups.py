"""Placement groups on the launch's hosts: bundles of resources reserved all or none by a strategy, actors then
spawned into a bundle (``spawn(..., placement=ResourceRequest(group_id=g.group_id, bundle_index=i))``)."""

from __future__ import annotations

from runtime.caller.client import ClientRuntime
from runtime.placement import lease_owner
from runtime.placement.placement_api import CALL_DEADLINE_S, call
from runtime.placement.placement_types import GroupSpec, GroupView, Strategy
from runtime.processes.spawn_checks import check_lifetime


async def create_group_async(
    bundles: list[dict[str, float]],
    strategy: Strategy = "PACK",
    *,
    name: str = "",
    wait_s: float = 0.0,
    lifetime: str | None = None,
) -> GroupView:
    """Reserve ``bundles`` over the launch's hosts by ``strategy`` (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD), all
    or none: PlacementRefused, saying what is short, at once or after ``wait_s``. It lives as long as this process
    (``lifetime="detached"``: as the launch) or until :func:`remove_group`."""
    check_lifetime(lifetime)
    spec = GroupSpec(bundles=bundles, strategy=strategy, name=name)
    lease_owner.keep_renewing()
    return await call(
        "create_group", spec=spec, owner=lease_owner.owner(), wait_s=wait_s, detached=lifetime == "detached"
    )


def create_group(
    bundles: list[dict[str, float]],
    strategy: Strategy = "PACK",
    *,
    name: str = "",
    wait_s: float = 0.0,
    lifetime: str | None = None,
) -> GroupView:
    """Blocking :func:`create_group_async`."""
    coro = create_group_async(bundles, strategy, name=name, wait_s=wait_s, lifetime=lifetime)
    return ClientRuntime.get().run(coro, timeout_s=wait_s + CALL_DEADLINE_S + 5, what="create a placement group")


async def remove_group_async(group: GroupView | str) -> GroupView:
    """Return every bundle of this process's group; the actors placed in it are stopped."""
    group_id = group if isinstance(group, str) else group.group_id
    return await call("remove_group", group_id=group_id, owner=lease_owner.owner())


def remove_group(group: GroupView | str) -> GroupView:
    """Blocking :func:`remove_group_async`."""
    return ClientRuntime.get().run(remove_group_async(group), timeout_s=CALL_DEADLINE_S + 5, what="remove a group")
