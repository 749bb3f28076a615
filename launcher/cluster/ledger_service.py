"""The cluster ledger as the launch's placement API: what every process of the launch asks about its hosts, and
how it places actors on them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Annotated, TypeVar

from pydantic import Field

from launcher.cluster.ledger import POOL_LEASE, ClusterLedger, Lease
from launcher.cluster.placed_actors import PlacedActors
from runtime import within
from runtime.placement import (
    ExitReport,
    Grant,
    GroupSpec,
    GroupView,
    LeaseView,
    NodeView,
    PlacementApi,
    PlacementRefused,
    PlacementShort,
    ResourceRequest,
    Started,
    StartSpec,
)

T = TypeVar("T")
RETRY_S = 0.1  # a request that waits for room tries again this often
OWNER_CHECK_S = 1.0
MAX_WAIT_S = 3600.0
_Id = Annotated[str, Field(min_length=1, max_length=200)]
_Wait = Annotated[float, Field(ge=0, le=MAX_WAIT_S)]


class LedgerService(PlacementApi):
    """Answers :class:`runtime.placement.PlacementApi` from ``ledger`` and ``placed`` (served by the launcher
    in-process). An owner that stops renewing for ``owner_timeout_s`` (its process died: a runtime renews every
    second while it holds leases) loses its actors, but for detached ones."""

    def __init__(self, *, ledger: ClusterLedger, placed: PlacedActors, owner_timeout_s: float) -> None:
        self._ledger = ledger
        self._placed = placed
        self._owner_timeout_s = owner_timeout_s
        self._seen: dict[str, float] = {}  # owner -> when it last renewed (or reserved)
        self._detached: set[str] = set()
        self._watching = False

    def nodes(self) -> list[NodeView]:
        return self._ledger.nodes()

    def holders(self) -> list[LeaseView]:
        return [
            LeaseView(
                lease_id=lease.lease_id,
                owner=_shown(lease.owner),
                label=lease.label,
                host=lease.host,
                resources=lease.claim.asked(),
                gpu_ids=list(lease.claim.gpu_ids),
                group_id=lease.group_id,
                bundle_index=lease.bundle_index,
            )
            for lease in self._ledger.leases()
        ]

    async def reserve(self, request: ResourceRequest, label: _Id, owner: _Id, detached: bool = False) -> Grant:
        self._renewed(owner)
        grant = await _until_it_fits(lambda: self._ledger.reserve(request, owner=owner, label=label), request.wait_s)
        if detached:
            self._detached.add(grant.lease_id)
        return grant

    async def start(self, lease_id: _Id, owner: _Id, spec: StartSpec) -> Started:
        lease = self._owned(lease_id, owner)
        node_id = next(node.node_id for node in self._ledger.nodes() if node.host == lease.host)
        self._placed.launch(lease, spec, node_id=node_id)
        try:
            started, failure, ended = await self._until(lease_id, spec.ready_deadline_s + 5.0)
        except TimeoutError:
            self._placed.kill(lease_id)
            raise RuntimeError(f"{spec.label} on {lease.host}: not up within {spec.ready_deadline_s:g} s") from None
        if ended is not None:
            raise RuntimeError(ended.model_copy(update={"reason": f"{ended.reason} before it was up"}).describe())
        if failure is not None or started is None:
            self._placed.kill(lease_id)
            raise RuntimeError(f"{spec.label} on {lease.host} did not start: {failure}")
        return started

    async def release(self, lease_id: _Id, owner: _Id) -> bool:
        if not any(lease.lease_id == lease_id for lease in self._ledger.leases()):
            return False  # ended already (its process exited, or it was released): nothing to do
        self._owned(lease_id, owner)
        self._placed.kill(lease_id)
        self._detached.discard(lease_id)
        return True

    async def wait_exit(self, lease_id: _Id, wait_s: _Wait = 30.0) -> ExitReport | None:
        try:
            return (await self._until(lease_id, wait_s, exited=True))[2]
        except TimeoutError:
            return None

    async def create_group(self, spec: GroupSpec, owner: _Id, wait_s: _Wait = 0.0, detached: bool = False) -> GroupView:
        self._renewed(owner)
        group = await _until_it_fits(lambda: self._ledger.create_group(spec, owner=owner), wait_s)
        if detached:
            self._detached.add(group.group_id)
        return group

    async def remove_group(self, group_id: _Id, owner: _Id) -> GroupView:
        if not any(g.group_id == group_id for g in self._ledger.groups(owner)):
            raise PlacementRefused(f"placement group {group_id[:80]!r} is not held by this process")
        return self._remove_group(group_id)

    def groups(self) -> list[GroupView]:
        return self._ledger.groups()

    async def renew(self, owner: _Id) -> None:
        self._renewed(owner)

    # ---- helpers ------------------------------------------------------------------------------------------------

    def _owned(self, lease_id: str, owner: str) -> Lease:
        found = next((lease for lease in self._ledger.leases(owner) if lease.lease_id == lease_id), None)
        if found is None or lease_id.startswith(POOL_LEASE):
            raise PlacementRefused(f"lease {lease_id[:80]!r} is not held by this process (ended, or never its own)")
        self._renewed(owner)
        return found

    async def _until(
        self, lease_id: str, timeout_s: float, *, exited: bool = False
    ) -> tuple[Started | None, str | None, ExitReport | None]:
        """The lease's process state once it is up, failed or exited (only exited, with ``exited``)."""
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()
        remove = self._placed.watch(lease_id, lambda: loop.call_soon_threadsafe(changed.set))
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                started, failure, ended = state = self._placed.state(lease_id)
                if ended is not None or (not exited and (started is not None or failure is not None)):
                    return state
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                changed.clear()
                await within(changed.wait(), left)
        finally:
            remove()

    def _remove_group(self, group_id: str) -> GroupView:
        """Return every bundle of the group and stop the actors placed in it."""
        view, ended = self._ledger.remove_group(group_id)
        for lease in ended:
            self._placed.kill(lease.lease_id)
        self._detached.discard(group_id)
        return view

    def _renewed(self, owner: str) -> None:
        self._seen[owner] = time.monotonic()
        if not self._watching:
            self._watching = True
            asyncio.get_running_loop().call_later(OWNER_CHECK_S, self._expire_owners)

    def _expire_owners(self) -> None:
        """Stop the actors of owners gone silent (their process died: its runtime renews every second); a timer on
        the service's loop, every second (nothing is left pending when the loop stops)."""
        now = time.monotonic()
        for owner, seen in list(self._seen.items()):
            if now - seen < self._owner_timeout_s:
                continue
            del self._seen[owner]
            for group in self._ledger.groups(owner):
                if group.group_id not in self._detached and group.state == "CREATED":
                    self._remove_group(group.group_id)
            for lease in self._ledger.leases(owner):
                if lease.lease_id not in self._detached:
                    self._placed.kill(lease.lease_id)
        asyncio.get_running_loop().call_later(OWNER_CHECK_S, self._expire_owners)


async def _until_it_fits(attempt: Callable[[], T], wait_s: float) -> T:
    """``attempt()`` until it is not refused for want of room, for at most ``wait_s`` (0: once); any other refusal
    (no such host, resource or bundle) at once."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return attempt()
        except PlacementShort as exc:
            if time.monotonic() >= deadline:
                if wait_s:
                    raise PlacementShort(f"still short after waiting {wait_s:g} s: {exc}") from None
                raise
        await asyncio.sleep(RETRY_S)


def _shown(owner: str) -> str:
    """An owner as others see it: its host and pid, never its secret part (which proves ownership)."""
    return owner.rsplit("/", 1)[0]
