"""Placement: reserve (host, gpu) slots for every worker of every cell, all-or-nothing, before anything starts, so
that a launch that cannot fit fails at once, saying what is short."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from launcher.config.hosts_config import HostConfig
from launcher.config.specs import PoolSpec, Strategy
from launcher.console.text_columns import aligned
from launcher.errors import PlacementError


@dataclass(frozen=True)
class WorkerPlacement:
    """Where one worker runs and what it is told.

    The launcher sets CUDA_VISIBLE_DEVICES from ``gpu_ids`` (empty for CPU workers) and LOCAL_RANK = ``local_rank``
    (its index among its cell's workers on the same host). CUDA_VISIBLE_DEVICES is never rewritten silently:
    hosts.toml/spec ``env`` may not set it (ConfigError), and if a host's own environment sets it, every GPU planned
    on that host must be listed there or the launch fails (HostCheckError)."""

    pool_id: str
    cell_index: int
    worker_index: int
    host: str
    gpu_ids: tuple[int, ...]
    gpu_share: float  # fraction of each listed GPU reserved (1.0 for whole GPUs, 0 for CPU workers)
    local_rank: int
    world_size: int

    @property
    def cell_id(self) -> str:
        """``{pool_id}-{cell_index}``."""
        return f"{self.pool_id}-{self.cell_index}"

    @property
    def worker_id(self) -> str:
        """``{pool_id}-{cell_index}-{worker_index}``."""
        return f"{self.pool_id}-{self.cell_index}-{self.worker_index}"


@dataclass(frozen=True)
class CellPlacement:
    """The gang of workers of one cell; worker 0's host is the cell master."""

    pool_id: str
    index: int
    workers: tuple[WorkerPlacement, ...]

    @property
    def cell_id(self) -> str:
        """``{pool_id}-{index}``."""
        return f"{self.pool_id}-{self.index}"

    @property
    def master_host(self) -> str:
        """Host of worker 0 (where cell-scoped ports are allocated)."""
        return self.workers[0].host


@dataclass(frozen=True)
class PlacementPlan:
    """Cells per pool, in pool order."""

    pools: dict[str, tuple[CellPlacement, ...]]

    def cells(self, pool_id: str | None = None) -> list[CellPlacement]:
        """Cells of one pool, or of every pool."""
        if pool_id is not None:
            return list(self.pools[pool_id])
        return [cell for cells in self.pools.values() for cell in cells]

    def workers(self) -> list[WorkerPlacement]:
        """Every worker of the plan."""
        return [w for cell in self.cells() for w in cell.workers]

    def hosts_used(self) -> list[str]:
        """Hosts with at least one worker, in first-use order."""
        return list(dict.fromkeys(w.host for w in self.workers()))

    def describe(self) -> str:
        """A human-readable table of the plan (``miles-launch --dry-run``)."""
        rows = [("worker", "host", "gpus", "share", "local_rank")]
        for w in self.workers():
            gpus = ",".join(map(str, w.gpu_ids)) or "-"
            rows.append((w.worker_id, w.host, gpus, f"{w.gpu_share:.3g}", str(w.local_rank)))
        return "\n".join(aligned(rows))


@dataclass
class Inventory:
    """Free GPU capacity per (host, gpu) slot (capacity 1 each), ordered by host (hosts.toml order) then gpu id."""

    hosts: list[str]
    free: dict[str, dict[int, Fraction]] = field(default_factory=dict)

    @classmethod
    def from_hosts(cls, hosts: list[HostConfig] | tuple[HostConfig, ...]) -> Inventory:
        """One slot of capacity 1 per GPU id of every host."""
        return cls(hosts=[h.name for h in hosts], free={h.name: {g: Fraction(1) for g in h.gpu_ids} for h in hosts})

    def slots(self) -> list[tuple[str, int]]:
        """All (host, gpu) slots in order."""
        return [(h, g) for h in self.hosts for g in sorted(self.free[h])]

    def fits(self, host: str, amount: Fraction, *, emptiest: bool = False, min_gpu: int = 0) -> tuple[int, ...] | None:
        """GPU ids (>= ``min_gpu``) on ``host`` that can take a bundle of ``amount`` GPUs, or None."""
        return gpus_that_fit(self.free[host], amount, emptiest=emptiest, min_gpu=min_gpu)

    def take(self, host: str, gpus: tuple[int, ...], share: Fraction) -> None:
        """Reserve ``share`` of each listed GPU."""
        for gpu in gpus:
            if self.free[host][gpu] < share:
                raise PlacementError(f"host {host!r} gpu {gpu}: only {float(self.free[host][gpu]):.3g} free")
            self.free[host][gpu] -= share

    def summary(self, hosts: list[str]) -> str:
        """Free GPUs per host, e.g. ``a: 1.5 free of 2 GPUs``."""
        parts = []
        for host in hosts:
            free = self.free[host]
            parts.append(f"{host}: {float(sum(free.values(), Fraction(0))):.3g} free of {len(free)} GPU(s)")
        return "; ".join(parts)


def gpus_that_fit(
    free: dict[int, Fraction], amount: Fraction, *, emptiest: bool = False, min_gpu: int = 0
) -> tuple[int, ...] | None:
    """GPU ids (>= ``min_gpu``) among ``free`` (id -> free share) that can take ``amount`` GPUs, or None.

    A whole number takes that many wholly free GPUs, lowest ids first; a fraction goes on the first GPU with room
    (packing), or with ``emptiest`` on the GPU with the most room."""
    if amount == 0:
        return ()
    ids = [gpu for gpu in sorted(free) if gpu >= min_gpu]
    if amount < 1:
        candidates = [gpu for gpu in ids if free[gpu] >= amount]
        if not candidates:
            return None
        return (max(candidates, key=lambda gpu: (free[gpu], -gpu)) if emptiest else candidates[0],)
    whole = [gpu for gpu in ids if free[gpu] == 1]
    return tuple(whole[: int(amount)]) if len(whole) >= amount else None


def amount_of(quantity: float) -> Fraction:
    """A resource quantity as an exact fraction (shares that sum to 1 fill a GPU exactly)."""
    return Fraction(quantity).limit_denominator(1000)


def plan_placement(
    hosts: tuple[HostConfig, ...] | list[HostConfig], pools: tuple[PoolSpec, ...] | list[PoolSpec]
) -> PlacementPlan:
    """Reserve every worker of every pool; raise PlacementError (nothing reserved) if any bundle does not fit.

    A worker is a bundle of ``gpus`` GPUs: 0 (CPU only, placed on a host), a fraction < 1 (shares one GPU), or a
    whole number (that many free GPUs on one host). A cell's bundles are reserved as a gang:

    - PACK: the whole cell on the first host where it fits; otherwise fill hosts in order.
    - SPREAD: bundles round-robin over hosts (the cursor carries over between cells of a pool); fractions go to the
      emptiest GPU of the host (PACK puts them on the first GPU with room).
    - ``colocate_with``: worker (i, j) uses the same host and GPUs as worker (i, j) of the other pool, consuming its
      own (fractional) share of those GPUs; pools of other shapes pair their workers in (cell, worker) order (8
      engine cells of one worker beside a trainer cell of 8 ranks), as long as both have as many workers."""
    inventory = Inventory.from_hosts(hosts)
    ordered = _colocation_order(list(pools))
    placed: dict[str, tuple[CellPlacement, ...]] = {}
    for pool in ordered:
        allowed = list(pool.hosts) if pool.hosts else inventory.hosts
        unknown = [h for h in allowed if h not in inventory.free]
        if unknown:
            raise PlacementError(f"pool {pool.id!r}: unknown hosts {unknown} (known: {inventory.hosts})")
        if pool.colocate_with is not None:
            placed[pool.id] = _colocate(pool, placed[pool.colocate_with], inventory)
            continue
        cursor = 0
        cells = []
        for index in range(pool.cells):
            bundles, cursor = _place_cell(pool, index, allowed, inventory, cursor)
            cells.append(_cell(pool, index, bundles))
        placed[pool.id] = tuple(cells)
    return PlacementPlan(pools={pool.id: placed[pool.id] for pool in pools})


def _colocation_order(pools: list[PoolSpec]) -> list[PoolSpec]:
    by_id = {p.id: p for p in pools}
    order: list[PoolSpec] = []
    visiting: set[str] = set()

    def visit(pool: PoolSpec) -> None:
        if pool in order:
            return
        if pool.id in visiting:
            raise PlacementError(f"pool {pool.id!r}: colocate_with forms a cycle")
        visiting.add(pool.id)
        if pool.colocate_with is not None:
            if pool.colocate_with not in by_id:
                raise PlacementError(f"pool {pool.id!r}: colocate_with names unknown pool {pool.colocate_with!r}")
            visit(by_id[pool.colocate_with])
        order.append(pool)

    for pool in pools:
        visit(pool)
    return order


def _place_cell(
    pool: PoolSpec, index: int, allowed: list[str], inv: Inventory, cursor: int
) -> tuple[list[tuple[str, tuple[int, ...]]], int]:
    amount = amount_of(pool.worker.gpus)
    share = amount if amount < 1 else Fraction(1)
    bundles: list[tuple[str, tuple[int, ...]]] = []
    if pool.strategy is Strategy.PACK:
        for host in allowed:  # whole cell on one host, if any host can take it
            trial = Inventory(hosts=inv.hosts, free={h: dict(v) for h, v in inv.free.items()})
            got = _fill(trial, host, amount, share, pool.workers_per_cell, pool.min_gpu_id)
            if got is not None:
                inv.free = trial.free
                return [(host, g) for g in got], cursor
    for worker in range(pool.workers_per_cell):
        order = allowed if pool.strategy is Strategy.PACK else allowed[cursor:] + allowed[:cursor]
        for offset, host in enumerate(order):
            gpus = inv.fits(host, amount, emptiest=pool.strategy is Strategy.SPREAD, min_gpu=pool.min_gpu_id)
            if gpus is not None:
                inv.take(host, gpus, share)
                bundles.append((host, gpus))
                if pool.strategy is Strategy.SPREAD:
                    cursor = (cursor + offset + 1) % len(allowed)
                break
        else:
            raise PlacementError(
                f"pool {pool.id!r} cell {pool.cell_id(index)!r} worker {worker}: no host can take "
                f"{float(amount):g} GPU(s) ({pool.strategy.value}, hosts {allowed}); {inv.summary(allowed)}. "
                "Nothing was started: lower gpus/cells/workers_per_cell or add GPUs."
            )
    return bundles, cursor


def _fill(
    inv: Inventory, host: str, amount: Fraction, share: Fraction, count: int, min_gpu: int
) -> list[tuple[int, ...]] | None:
    got = []
    for _ in range(count):
        gpus = inv.fits(host, amount, min_gpu=min_gpu)
        if gpus is None:
            return None
        inv.take(host, gpus, share)
        got.append(gpus)
    return got


def _colocate(pool: PoolSpec, target: tuple[CellPlacement, ...], inv: Inventory) -> tuple[CellPlacement, ...]:
    amount = amount_of(pool.worker.gpus)
    theirs = [w for cell in target for w in cell.workers]  # paired in order: (cell, worker) of both pools, flattened
    if len(theirs) != pool.cells * pool.workers_per_cell:
        raise PlacementError(
            f"pool {pool.id!r}: colocate_with {pool.colocate_with!r} needs as many workers (cells x "
            f"workers_per_cell: {pool.cells} x {pool.workers_per_cell}) as it has ({len(theirs)})"
        )
    if amount >= 1:
        raise PlacementError(f"pool {pool.id!r}: colocated workers must use a fraction of a GPU, got {float(amount):g}")
    cells = []
    for index in range(pool.cells):
        bundles = []
        for other in theirs[index * pool.workers_per_cell : (index + 1) * pool.workers_per_cell]:
            gpus = other.gpu_ids if amount > 0 else ()
            for gpu in gpus:
                if inv.free[other.host][gpu] < amount:
                    raise PlacementError(
                        f"pool {pool.id!r} cell {pool.cell_id(index)!r}: host {other.host!r} gpu {gpu} has "
                        f"{float(inv.free[other.host][gpu]):.3g} free, needs {float(amount):g} to colocate with "
                        f"{other.worker_id!r}. Nothing was started: make the shares sum to <= 1."
                    )
            inv.take(other.host, gpus, amount)
            bundles.append((other.host, gpus))
        cells.append(_cell(pool, index, bundles, share=amount))
    return tuple(cells)


def _cell(
    pool: PoolSpec, index: int, bundles: list[tuple[str, tuple[int, ...]]], share: Fraction | None = None
) -> CellPlacement:
    amount = amount_of(pool.worker.gpus)
    share = share if share is not None else (amount if amount < 1 else Fraction(1))
    per_host: dict[str, int] = {}
    workers = []
    for worker, (host, gpus) in enumerate(bundles):
        local_rank = per_host.get(host, 0)
        per_host[host] = local_rank + 1
        workers.append(
            WorkerPlacement(
                pool_id=pool.id,
                cell_index=index,
                worker_index=worker,
                host=host,
                gpu_ids=gpus,
                gpu_share=float(share) if gpus else 0.0,
                local_rank=local_rank,
                world_size=pool.workers_per_cell,
            )
        )
    return CellPlacement(pool_id=pool.id, index=index, workers=tuple(workers))
