"""The cluster ledger: every host of a launch with its resources, and who holds what (pool workers for the whole
launch, actors placed at run time, placement groups' bundles), so a request anywhere is granted or refused at once
with what is short."""

from __future__ import annotations

import hashlib
import itertools
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from launcher.cluster.capacity import Capacity, Claim
from launcher.cluster.group_placement import place_bundles
from launcher.config.hosts_config import HostConfig
from launcher.config.placement import PlacementPlan, amount_of
from runtime.placement import (
    CPU,
    BundleView,
    Grant,
    GroupSpec,
    GroupView,
    NodeView,
    PlacementRefused,
    PlacementShort,
    ResourceRequest,
)

FIX = "kill actors, remove placement groups, or add hosts"
POOL_LEASE = "pool:"  # a pool worker's lease: ``pool:<worker_id>``, held for the whole launch


@dataclass
class _Node:
    config: HostConfig
    node_id: str
    capacity: Capacity
    up: bool = False
    lost_reason: str | None = None


@dataclass
class _Bundle:
    index: int
    host: str
    claim: Claim  # what the bundle holds of its host
    capacity: Capacity  # what actors in the bundle take from


@dataclass
class _Group:
    group_id: str
    spec: GroupSpec
    owner: str
    bundles: list[_Bundle]
    state: str = "CREATED"
    reason: str | None = None


@dataclass
class Lease:
    """One holder's claim: a pool worker (``pool:<worker_id>``, held for the launch) or an actor placed at run
    time (``rt-<n>``), on ``host`` or inside a placement group's bundle."""

    lease_id: str
    owner: str
    label: str
    host: str
    claim: Claim
    group_id: str | None = None
    bundle_index: int = -1


@dataclass
class LostHost:
    """What a lost host took with it: every lease on it, and the groups that failed (their other bundles' leases
    were returned too, and are listed: their actors must be stopped)."""

    leases: list[Lease] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)


class ClusterLedger:
    """Hosts, totals and holders of one launch (thread-safe: agent threads and the service both call it).

    A host takes run-time actors once its agent said hello (:meth:`host_up`: its CPU count unless hosts.toml gives
    ``cpus``) until it is lost (:meth:`host_lost`); pool workers hold their GPUs from the start, for the launch."""

    def __init__(self, hosts: Sequence[HostConfig], plan: PlacementPlan | None = None, *, launch_id: str = "") -> None:
        self._lock = threading.Lock()
        self._nodes = {host.name: _Node(host, _node_id(launch_id, host.name), _whole(host)) for host in hosts}
        self._leases: dict[str, Lease] = {}
        self._groups: dict[str, _Group] = {}
        self._numbers = itertools.count(1)
        for worker in plan.workers() if plan is not None else []:
            claim = Claim(
                gpu_ids=worker.gpu_ids, gpu_share=amount_of(worker.gpu_share) if worker.gpu_ids else Fraction(0)
            )
            self._nodes[worker.host].capacity.take(claim)
            lease = Lease(f"{POOL_LEASE}{worker.worker_id}", "launch", f"pool {worker.pool_id}", worker.host, claim)
            self._leases[lease.lease_id] = lease

    # hosts ------------------------------------------------------------------------------------------------

    def host_up(self, host: str, *, cpus: int) -> None:
        """The host's agent is up (again, after a loss: whole, less what its pools hold) and sees ``cpus`` CPUs
        (hosts.toml's ``cpus`` wins)."""
        with self._lock:
            node = self._nodes[host]
            if node.lost_reason is not None:
                node.capacity = _whole(node.config)
                for lease in self._leases.values():
                    if lease.host == host:
                        node.capacity.take(lease.claim)
            node.capacity.set_total(CPU, Fraction(cpus if node.config.cpus is None else node.config.cpus))
            node.up, node.lost_reason = True, None

    def host_lost(self, host: str, reason: str) -> LostHost:
        """The host's agent is gone: the leases of actors on it end, it takes no more until its agent is back, and
        every placement group with a bundle there fails whole. Its pools keep their GPUs (their cells restart
        there)."""
        with self._lock:
            node = self._nodes[host]
            node.up, node.lost_reason = False, reason
            lost = LostHost()
            for group in self._groups.values():
                if group.state == "CREATED" and any(bundle.host == host for bundle in group.bundles):
                    where = [bundle.index for bundle in group.bundles if bundle.host == host]
                    lost.leases += self._end_group(group, "FAILED", f"host {host!r} lost ({reason}); bundle(s) {where}")
                    lost.groups.append(group.group_id)
            for lease in [lease for lease in self._leases.values() if lease.host == host]:
                if not lease.lease_id.startswith(POOL_LEASE):
                    lost.leases.append(self._drop(lease))
            return lost

    def nodes(self) -> list[NodeView]:
        """Every host, in hosts.toml order (``alive`` once its agent said hello, until lost)."""
        with self._lock:
            return [
                NodeView(
                    host=name,
                    node_id=node.node_id,
                    address=node.config.reach_address,
                    alive=node.up,
                    lost_reason=node.lost_reason,
                    total=node.capacity.totals(),
                    available=node.capacity.available(),
                    gpu_ids=list(node.config.gpu_ids),
                )
                for name, node in self._nodes.items()
            ]

    # leases ----------------------------------------------------------------------------------------------

    def reserve(self, request: ResourceRequest, *, owner: str, label: str) -> Grant:
        """Hold ``request.resources`` for ``label`` (an actor of ``owner``) or raise PlacementRefused saying what is
        short; nothing is held after a refusal."""
        with self._lock:
            self._check_names(request.resources, label)
            if request.group_id is not None:
                return self._reserve_in_group(request, owner=owner, label=label)
            candidates = self._candidates(request, label)
            for name in candidates:
                claim = self._nodes[name].capacity.fit(request.resources, emptiest=request.spread)
                if claim is not None:
                    self._nodes[name].capacity.take(claim)
                    return self._grant(self._lease(owner, label, name, claim))
            hosts = "; ".join(f"{name} {self._held(name, request.resources)}" for name in candidates)
            raise PlacementShort(
                f"{label} {request.resources}: no host has it free (free/total): {hosts or 'no alive host'}. "
                f"Nothing was started: {FIX}."
            )

    def release(self, lease_id: str) -> Lease | None:
        """Return a lease's resources (to its host, or to its bundle); None when it is not held (released twice)."""
        with self._lock:
            lease = self._leases.get(lease_id)
            return None if lease is None else self._drop(lease)

    def leases(self, owner: str | None = None) -> list[Lease]:
        """Every lease held, or ``owner``'s."""
        with self._lock:
            return [lease for lease in self._leases.values() if owner is None or lease.owner == owner]

    # placement groups ------------------------------------------------------------------------------------

    def create_group(self, spec: GroupSpec, *, owner: str) -> GroupView:
        """Reserve every bundle of ``spec`` over the alive hosts, or raise PlacementRefused (nothing reserved)."""
        with self._lock:
            for index, bundle in enumerate(spec.bundles):
                self._check_names(bundle, f"bundle {index}")
            if spec.name and any(g.spec.name == spec.name and g.state == "CREATED" for g in self._groups.values()):
                raise PlacementRefused(f"a placement group named {spec.name!r} already exists; remove it or rename")
            alive = {name: node.capacity for name, node in self._nodes.items() if node.up}
            placed = place_bundles(alive, spec)
            bundles = []
            for index, (host, claim) in enumerate(placed):
                self._nodes[host].capacity.take(claim)
                bundles.append(
                    _Bundle(index, host, claim, Capacity.of(claim.resources, claim.gpu_ids, claim.gpu_share))
                )
            group = _Group(secrets.token_hex(18), spec, owner, bundles)
            self._groups[group.group_id] = group
            return self._view(group)

    def remove_group(self, group_id: str) -> tuple[GroupView, list[Lease]]:
        """Return every bundle of the group; the leases of the actors in it end too (listed: stop those actors)."""
        with self._lock:
            group = self._group(group_id)
            ended = self._end_group(group, "REMOVED", "removed") if group.state == "CREATED" else []
            return self._view(group), ended

    def group(self, group_id: str) -> GroupView:
        with self._lock:
            return self._view(self._group(group_id))

    def groups(self, owner: str | None = None) -> list[GroupView]:
        """Every placement group, or ``owner``'s."""
        with self._lock:
            return [self._view(g) for g in self._groups.values() if owner is None or g.owner == owner]

    # under the lock --------------------------------------------------------------------------------------

    def _check_names(self, resources: dict[str, float], what: str) -> None:
        declared = {name for node in self._nodes.values() for name in node.capacity.totals()}
        unknown = sorted(set(resources) - declared - {"GPU", CPU})
        if unknown:
            raise PlacementRefused(
                f"{what}: no host declares resource {unknown[0]!r} (hosts.toml: resources = {{{unknown[0]} = N}} "
                "on a host)"
            )

    def _candidates(self, request: ResourceRequest, label: str) -> list[str]:
        """Alive hosts to try, in order: the asked host (only it, unless soft), else by spread or nearness."""
        alive = [name for name, node in self._nodes.items() if node.up]
        if request.host is not None:
            node = self._nodes.get(request.host)
            if node is None:
                raise PlacementRefused(
                    f"{label}: host {request.host!r} is not a host of this launch ({', '.join(self._nodes)})"
                )
            if not node.up and not request.soft:
                why = f"is lost ({node.lost_reason})" if node.lost_reason else "has no agent up yet"
                raise PlacementRefused(f"{label}: host {request.host!r} {why}; it takes no actors")
            if not request.soft:
                return [request.host]
            return [request.host, *(name for name in alive if name != request.host)] if node.up else alive
        if request.spread:
            placed = {name: sum(1 for lease in self._leases.values() if lease.host == name) for name in alive}
            return sorted(alive, key=lambda name: placed[name])
        if request.near_host in alive:
            return [request.near_host, *(name for name in alive if name != request.near_host)]
        return alive

    def _reserve_in_group(self, request: ResourceRequest, *, owner: str, label: str) -> Grant:
        group = self._group(request.group_id or "")
        what = f"placement group {group.spec.name or group.group_id!r}"
        if group.state != "CREATED":
            raise PlacementRefused(f"{label}: {what} was {group.state.lower()}: {group.reason}")
        if request.bundle_index >= len(group.bundles):  # Ray's words
            raise PlacementRefused(
                f"{label}: bundle index {request.bundle_index} is invalid: {what} has {len(group.bundles)} bundle(s)"
            )
        bundles = group.bundles if request.bundle_index < 0 else [group.bundles[request.bundle_index]]
        for bundle in bundles:
            claim = bundle.capacity.fit(request.resources)
            if claim is not None:
                bundle.capacity.take(claim)
                lease = self._lease(owner, label, bundle.host, claim, group.group_id, bundle.index)
                return self._grant(lease)
        shown = "; ".join(f"bundle {b.index} on {b.host}: {b.capacity.shortfall(request.resources)}" for b in bundles)
        raise PlacementShort(f"{label} {request.resources}: {what} has no room (free/total): {shown}")

    def _lease(
        self, owner: str, label: str, host: str, claim: Claim, group_id: str | None = None, bundle_index: int = -1
    ) -> Lease:
        lease = Lease(f"rt-{next(self._numbers)}", owner, label, host, claim, group_id, bundle_index)
        self._leases[lease.lease_id] = lease
        return lease

    def _grant(self, lease: Lease) -> Grant:
        return Grant(
            lease_id=lease.lease_id, host=lease.host, address=self._nodes[lease.host].config.reach_address,
            gpu_ids=list(lease.claim.gpu_ids), gpu_share=float(lease.claim.gpu_share),
            resources=lease.claim.asked(), group_id=lease.group_id, bundle_index=lease.bundle_index,
        )  # fmt: skip

    def _drop(self, lease: Lease) -> Lease:
        del self._leases[lease.lease_id]
        group = self._groups.get(lease.group_id or "")
        if group is not None:
            if group.state == "CREATED":
                group.bundles[lease.bundle_index].capacity.give_back(lease.claim)
        elif self._nodes[lease.host].lost_reason is None:
            self._nodes[lease.host].capacity.give_back(lease.claim)
        return lease

    def _end_group(self, group: _Group, state: str, reason: str) -> list[Lease]:
        ended = [self._drop(lease) for lease in list(self._leases.values()) if lease.group_id == group.group_id]
        group.state, group.reason = state, reason
        for bundle in group.bundles:
            if self._nodes[bundle.host].lost_reason is None:
                self._nodes[bundle.host].capacity.give_back(bundle.claim)
        return ended

    def _held(self, host: str, resources: dict[str, float]) -> str:
        """Free/total of the asked resources on ``host``, and who holds most of them (leases and placement groups
        holding some of what was asked)."""
        holders: dict[str, int] = {}

        def holds(label: str, claim: Claim) -> None:
            if any(name in resources for name in claim.asked()):
                holders[label] = holders.get(label, 0) + 1

        for lease in self._leases.values():
            if lease.host == host and lease.group_id is None:
                holds(lease.label, lease.claim)
        for group in self._groups.values():
            for bundle in group.bundles if group.state == "CREATED" else []:
                if bundle.host == host:
                    holds(f"placement group {group.spec.name or group.group_id[:8]}", bundle.claim)
        held = ", ".join(f"{label} x{count}" for label, count in sorted(holders.items(), key=lambda kv: -kv[1])[:3])
        return self._nodes[host].capacity.shortfall(resources) + (f" (held by {held})" if held else "")

    def _group(self, group_id: str) -> _Group:
        group = self._groups.get(group_id)
        if group is None:
            raise PlacementRefused(f"no placement group {group_id[:80]!r} in this launch")
        return group

    def _view(self, group: _Group) -> GroupView:
        return GroupView(
            group_id=group.group_id,
            name=group.spec.name,
            strategy=group.spec.strategy,
            state=group.state,
            reason=group.reason,
            bundles=[
                BundleView(
                    index=b.index,
                    host=b.host,
                    node_id=self._nodes[b.host].node_id,
                    resources=b.claim.asked(),
                    gpu_ids=list(b.claim.gpu_ids),
                )
                for b in group.bundles
            ],
        )


def _whole(host: HostConfig) -> Capacity:
    """A host's capacity with nothing held (its CPUs as hosts.toml gives them, else 0 until its agent says)."""
    return Capacity.of({CPU: host.cpus or 0, **host.resources}, host.gpu_ids)


def _node_id(launch_id: str, host: str) -> str:
    """A node id as Ray prints one (56 hex digits), stable for one launch."""
    return hashlib.blake2b(f"{launch_id}/{host}".encode(), digest_size=28).hexdigest()
