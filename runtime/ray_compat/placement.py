"""Placement groups (``ray.util.placement_group``) and scheduling strategies, mapped onto this machine's ledger
(Ray's python/ray/util/placement_group.py and scheduling_strategies.py)."""

from __future__ import annotations

import contextlib
import json
import operator
import os
from dataclasses import dataclass, field
from typing import Any

from runtime.placement import placement_groups as launch_groups
from runtime.placement.placement_types import ResourceRequest
from runtime.ray_compat import cluster, state
from runtime.ray_compat.refs import ObjectRef, _done
from runtime.ray_compat.resources import Ledger, node_id

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
#: The group an actor placed with placement_group_capture_child_tasks=True finds itself in (its environment).
CAPTURED_ENV = "MILES_RAY_CAPTURED_GROUP"
#: Inside a launch, how long ``placement_group`` waits for room (default 0: refused at once with what is short).
PLACEMENT_WAIT_ENV = "MILES_RAY_PLACEMENT_WAIT_S"
_captured: PlacementGroup | None = None


class GroupID(str):
    """A group's id; ``.hex()`` as Ray's PlacementGroupID."""

    def hex(self) -> str:  # type: ignore[override]
        return str(self)


@dataclass(eq=False)
class PlacementGroup:
    """A set of reserved bundles; ``ready()`` is a ref that is ready at once (the bundles are reserved).

    A group handed to an actor (as an argument), or captured by it (``placement_group_capture_child_tasks=True``:
    its own actors go there by default), is that actor's to fill: it gets the bundles as reserved and places into
    its copy of them, while the reservation stays with the driver's session (two processes filling one bundle are
    not checked against each other)."""

    id: str
    bundle_specs: list[dict[str, float]]
    strategy: str
    name: str
    bundles: list[Ledger] = field(default_factory=list)
    actors: list[Any] = field(default_factory=list)
    removed: bool = False
    _held: list[tuple[dict[str, float], list[str]]] = field(default_factory=list)
    node_ids: list[str] = field(default_factory=list)  # where each bundle is, in a launch (empty: this machine)
    hosts: list[str] = field(default_factory=list)

    @property
    def bundle_count(self) -> int:
        return len(self.bundle_specs)

    def __eq__(self, other: object) -> bool:
        """One group by its id, as Ray's: a copy, a task's argument and a ``ray.put`` value are the same group."""
        return isinstance(other, PlacementGroup) and str(other.id) == str(self.id)

    def __hash__(self) -> int:
        return hash(str(self.id))

    def __deepcopy__(self, memo: dict[int, Any]) -> PlacementGroup:
        return self  # a handle to one reservation (copying verl's worker groups keeps the group they hold)

    def __getstate__(self) -> dict[str, Any]:
        """What another process gets (a group handed to an actor, or captured by it): the bundles as reserved,
        for that process to fill; the reservation itself stays with this session."""
        bundles = [[dict(b.total), list(b.gpu_ids)] for b in self.bundles]
        return {"id": str(self.id), "specs": self.bundle_specs, "strategy": self.strategy, "name": self.name,
                "bundles": bundles, "node_ids": list(self.node_ids), "hosts": list(self.hosts)}  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            GroupID(state["id"]), [dict(s) for s in state["specs"]], str(state["strategy"]), str(state["name"]),
            [Ledger(dict(total), [str(g) for g in gpus]) for total, gpus in state["bundles"]],
            node_ids=[str(n) for n in state.get("node_ids", [])], hosts=[str(h) for h in state.get("hosts", [])],
        )  # fmt: skip

    def end(self) -> None:
        """Remove the group (``ray.shutdown()`` of the session that made it)."""
        remove_placement_group(self)

    def ready(self) -> ObjectRef:
        return ObjectRef(future=_done(self), what=f"placement group {self.name or self.id}")

    def wait(self, timeout_seconds: float = 30) -> bool:
        return not self.removed

    def bundle(self, index: int, what: str) -> Ledger:
        if self.removed:
            raise ValueError(f"{what}: placement group {self.name or self.id} was removed")
        try:
            index = operator.index(index)  # a numpy integer too, as Ray takes it
        except TypeError:
            index = None
        if index is None or not -1 <= index < self.bundle_count:
            raise ValueError(f"{what}: placement_group_bundle_index={index!r} is not in -1..{self.bundle_count - 1}")
        return self.bundles[index]

    def table(self) -> dict[str, Any]:
        """This group as ``ray.util.placement_group_table(pg)`` shows it."""
        return {
            "placement_group_id": self.id,
            "name": self.name,
            "bundles": {i: dict(spec) for i, spec in enumerate(self.bundle_specs)},
            "bundles_to_node_id": dict(enumerate(self.node_ids))
            if self.node_ids
            else dict.fromkeys(range(self.bundle_count), node_id()),
            "strategy": self.strategy,
            "state": "REMOVED" if self.removed else "CREATED",
        }


def placement_group(
    bundles: list[dict[str, float]],
    strategy: str = "PACK",
    name: str = "",
    lifetime: str | None = None,
    _max_cpu_fraction_per_node: float | None = None,
    _soft_target_node_id: str | None = None,
    bundle_label_selector: Any = None,
) -> PlacementGroup:
    """Reserve ``bundles`` (e.g. ``[{"GPU": 1, "CPU": 1}] * 4``) now; raises at once when they do not fit.

    The bundles (GPU ids included) come from the session's ledger (:mod:`runtime.ray_compat.resources`); an actor
    scheduled into bundle ``i`` takes its CPUs/GPUs from that bundle, so actors of one group share the GPUs the
    group holds, as in Ray. All bundles are on this machine: STRICT_SPREAD with more than one bundle cannot be met
    and raises (Ray would leave it pending); spreading over hosts is what hosts.toml pools do."""
    if strategy not in STRATEGIES:
        raise ValueError(f"placement_group: strategy must be one of {STRATEGIES}, got {strategy!r}")
    if not isinstance(bundles, list) or not bundles or not all(isinstance(b, dict) and b for b in bundles):
        raise ValueError("placement_group: bundles must be a non-empty list of non-empty dicts, e.g. [{'CPU': 1}]")
    unsupported = {
        "_max_cpu_fraction_per_node": _max_cpu_fraction_per_node,
        "_soft_target_node_id": _soft_target_node_id,
        "bundle_label_selector": bundle_label_selector,
    }
    for option, value in unsupported.items():
        if value is not None:
            raise NotImplementedError(f"placement_group({option}=...) is not supported by runtime.ray_compat")
    if lifetime not in (None, "detached"):
        raise ValueError(f"placement_group: lifetime must be None or 'detached', got {lifetime!r}")
    session = state.current()
    if session.cluster:
        return _launch_group(session, bundles, strategy, name, lifetime)
    if lifetime == "detached":
        raise NotImplementedError(
            "placement_group(lifetime='detached'): a placement group here is a reservation in this driver's ray.init "
            "session and ends with it; omit lifetime (detached actors need no group: .options(lifetime='detached'))"
        )
    if strategy == "STRICT_SPREAD" and len(bundles) > 1:
        raise ValueError(
            "placement_group(strategy='STRICT_SPREAD') with several bundles needs one node per bundle; "
            "a ray.init session of this machine has one node: run under miles-launch, whose hosts are the cluster"
        )
    group = PlacementGroup(GroupID(os.urandom(9).hex()), [dict(b) for b in bundles], strategy, name)
    what = f"placement group {name or group.id}"
    try:
        for spec in group.bundle_specs:
            held, gpu_ids = session.ledger.reserve({k: float(v) for k, v in spec.items()}, what)
            group._held.append((held, gpu_ids))
            group.bundles.append(Ledger(dict(held), gpu_ids))
    except ValueError:
        for held, gpu_ids in group._held:
            session.ledger.release(held, gpu_ids)
        raise
    session.groups.append(group)
    return group


def _launch_group(
    session: state.Session, bundles: list[dict[str, float]], strategy: str, name: str, lifetime: str | None
) -> PlacementGroup:
    """A group reserved on the launch's hosts (all bundles or none; ``MILES_RAY_PLACEMENT_WAIT_S``: how long to wait
    for room, default 0: refused at once with what is short, where Ray would leave it pending)."""
    wait_s = float(os.environ.get(PLACEMENT_WAIT_ENV) or 0.0)
    view = launch_groups.create_group(
        [{k: float(v) for k, v in b.items()} for b in bundles], strategy,  # type: ignore[arg-type]
        name=name, wait_s=wait_s, lifetime=lifetime,
    )  # fmt: skip
    group = PlacementGroup(
        GroupID(view.group_id), [dict(b) for b in bundles], strategy, name,
        [Ledger(dict(b.resources), [str(g) for g in b.gpu_ids]) for b in view.bundles],
        node_ids=[b.node_id for b in view.bundles], hosts=[b.host for b in view.bundles],
    )  # fmt: skip
    session.groups.append(group)
    return group


def remove_placement_group(group: PlacementGroup) -> None:
    """Kill the group's actors and give its bundles back."""
    if group.removed:
        return
    group.removed = True
    for lease in group.actors:
        with contextlib.suppress(Exception):
            lease.end()
    if group.node_ids:
        launch_groups.remove_group(str(group.id))  # the launch stops what else was placed in it
        session = state.running()  # not current(): at ray.shutdown() that would start a new session
        if session is not None:
            with contextlib.suppress(ValueError):
                session.groups.remove(group)
        return
    session = state.running()
    if session is not None:
        for held, gpu_ids in group._held:
            session.ledger.release(held, gpu_ids)
        with contextlib.suppress(ValueError):
            session.groups.remove(group)


def get_placement_group(name: str) -> PlacementGroup:
    session = state.current()
    for group in session.groups:
        if group.name == name:
            return group
    raise ValueError(f"no placement group named {name!r} in this session")


def placement_group_table(group: PlacementGroup | str | None = None) -> dict[str, Any]:
    """One group's record (given the group, or its id as Ray's internal state API takes it), or every group of
    the session by id (Ray's ``placement_group_table``)."""
    groups = {g.id: g for g in state.current().groups}
    if group is None:
        return {key: g.table() for key, g in groups.items()}
    if isinstance(group, PlacementGroup):
        return group.table()
    if group not in groups:
        raise ValueError(f"placement_group_table: no placement group with id {group!r} in this session")
    return groups[group].table()


def get_current_placement_group() -> PlacementGroup | None:
    """The placement group this actor was placed in with ``placement_group_capture_child_tasks=True`` (its own
    actors and tasks go there by default, as in Ray), else None."""
    global _captured
    if _captured is None:
        text = os.environ.get(CAPTURED_ENV)
        if text:
            group = PlacementGroup.__new__(PlacementGroup)
            group.__setstate__(json.loads(text))
            _captured = group
    return _captured


def captured_env(strategy: Any) -> dict[str, str]:
    """The environment an actor placed with ``strategy`` gets: its group, when it captures child tasks."""
    if isinstance(strategy, PlacementGroupSchedulingStrategy) and strategy.placement_group_capture_child_tasks:
        return {CAPTURED_ENV: json.dumps(strategy.placement_group.__getstate__())}
    return {}


@dataclass
class PlacementGroupSchedulingStrategy:
    placement_group: PlacementGroup
    placement_group_bundle_index: int = -1
    placement_group_capture_child_tasks: bool | None = None


@dataclass
class NodeAffinitySchedulingStrategy:
    node_id: str
    soft: bool
    _spill_on_unavailable: bool = False
    _fail_on_unavailable: bool = False


def where(strategy: Any, what: str) -> tuple[Ledger, PlacementGroup | None]:
    """The ledger an actor or task with ``scheduling_strategy=strategy`` takes its resources from."""
    session = state.current()
    if strategy is None or strategy == "DEFAULT":
        captured = get_current_placement_group()
        return (session.ledger, None) if captured is None else (_any_bundle(captured), captured)
    if strategy == "SPREAD":
        return session.ledger, None
    if isinstance(strategy, PlacementGroupSchedulingStrategy):
        group = strategy.placement_group
        index = strategy.placement_group_bundle_index
        if index == -1:
            group.bundle(0, what)
            return _any_bundle(group), group
        return group.bundle(index, what), group
    if isinstance(strategy, NodeAffinitySchedulingStrategy):
        if strategy.node_id != node_id() and not strategy.soft and not session.cluster:  # a launch: request_for
            raise ValueError(
                f"{what}: NodeAffinitySchedulingStrategy(node_id={strategy.node_id!r}) names another node; "
                f"runtime.ray_compat places on this one ({node_id()!r}); use soft=True, or a hosts.toml pool"
            )
        return session.ledger, None
    raise ValueError(
        f"{what}: scheduling_strategy must be 'DEFAULT', 'SPREAD', a PlacementGroupSchedulingStrategy or a "
        f"NodeAffinitySchedulingStrategy, got {strategy!r}"
    )


def request_for(strategy: Any, wants: dict[str, float], what: str) -> ResourceRequest:
    """What an actor with ``scheduling_strategy=strategy`` asks a launch for (a session inside one)."""
    resources = {name: amount for name, amount in wants.items() if amount and not name.startswith("node:")}
    nodes = [name.removeprefix("node:") for name in wants if name.startswith("node:")]  # Ray's per-node resource
    if strategy is None or strategy == "DEFAULT":
        captured = get_current_placement_group()
        if captured is not None and captured.node_ids:
            return ResourceRequest(resources=resources, group_id=str(captured.id))
        if nodes:
            return ResourceRequest(resources=resources, host=cluster.host_at(nodes[0], what))
        return ResourceRequest(resources=resources, near_host=os.environ.get("MILES_HOST") or None)
    if strategy == "SPREAD":
        return ResourceRequest(resources=resources, spread=True)
    if isinstance(strategy, PlacementGroupSchedulingStrategy):
        group, index = strategy.placement_group, strategy.placement_group_bundle_index
        if not group.node_ids:
            raise ValueError(f"{what}: placement group {group.name or group.id} is not one of this launch's groups")
        group.bundle(0 if index == -1 else index, what)
        return ResourceRequest(resources=resources, group_id=str(group.id), bundle_index=index)
    if isinstance(strategy, NodeAffinitySchedulingStrategy):
        return ResourceRequest(resources=resources, host=cluster.host_of(strategy.node_id, what), soft=strategy.soft)
    return ResourceRequest(resources=resources)  # where() refuses other strategies, as for a session of this machine


def task_host(strategy: Any) -> str | None:
    """Where a task with ``strategy`` runs: the host of its bundle of a launch's group when that is not this one,
    else None (this machine)."""
    if not isinstance(strategy, PlacementGroupSchedulingStrategy) or not strategy.placement_group.node_ids:
        return None
    group, index = strategy.placement_group, strategy.placement_group_bundle_index
    here = os.environ.get("MILES_HOST")
    hosts = group.hosts if index == -1 else [group.hosts[index]]
    return None if here in hosts else hosts[0]


def _any_bundle(group: PlacementGroup) -> Ledger:
    """Bundle index -1: the first bundle with the most room left."""
    return max(group.bundles, key=lambda b: sum(b.available().values()))
