"""The provider API: jobs and actors list, start, stop and restart the launch's cells through the launcher.

The launcher serves :class:`ProviderService` in-process as an actor; jobs and actors hold a handle (:func:`connect`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from pydantic import Field

from launcher.errors import LauncherError
from launcher.launch.cells import DeathReport
from launcher.launch.provider_views import CellView, WorkerView
from runtime import ActorHandle
from runtime.internals import CallPolicy, ServiceAddress, ServiceServer, connect_service, serve_service
from transport.security import FROM_ENV, CurveDir

if TYPE_CHECKING:
    from launcher.launch.cell_table import CellTable
    from launcher.launch.cells import CellInfo, WorkerInfo

#: Environment variable of a command job: the provider API's address (JSON: :func:`from_env`). A job entrypoint uses
#: ``ctx.provider_api`` (a handle) instead.
PROVIDER_API_ENV = "MILES_PROVIDER_API"
CALL_DEADLINE_S = 30.0  # queries; start/restart calls wait for the cells' start deadline on top
DEFAULT_START_WAIT_S = 300.0  # a start call without deadline_s waits up to [launcher] start_deadline_s (300 s)
MAX_DEATHS_PER_CALL = 1000

_Pool = Annotated[str, Field(min_length=1, max_length=200)]
_Index = Annotated[int, Field(ge=0, le=1_000_000)]
_Indices = Annotated[list[_Index], Field(max_length=10_000)]
_Deadline = Annotated[float, Field(gt=0, le=86_400)]


class ProviderApiError(RuntimeError):
    """A provider API call was refused (unknown pool or cell, a lost host) or did not get through."""


class CellControl(Protocol):
    """What the provider API has the launcher do to its cells (the provider's methods; they block until done)."""

    def start_cells(
        self, pool_id: str, indices: list[int] | None = None, *, deadline_s: float | None = None
    ) -> list[CellInfo]: ...

    def stop_cells(self, pool_id: str, indices: list[int] | None = None, *, grace_s: float | None = None) -> None: ...

    def restart_cell(self, pool_id: str, index: int, *, deadline_s: float | None = None) -> CellInfo: ...


class ProviderService:
    """The launch's cells as the provider API serves them: it reads the cell table and has ``control`` start, stop and
    restart cells (those calls wait for the cells to be ready, or stopped; calls for one cell are serialized).

    A cell on a lost host is dead and is not restarted there (the error says so): its host must come back first."""

    def __init__(self, *, table: CellTable, control: CellControl) -> None:
        self._table = table
        self._control = control
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}

    def pools(self) -> list[str]:
        """Pool ids in hosts.toml order."""
        return [pool.id for pool in self._table.config.pools]

    def cells(self, pool: _Pool) -> list[CellView]:
        """Every cell of the pool's plan, started or not, in index order."""
        started = {cell.index: cell for cell in self._table.cells(pool)}  # UnknownPool names the pools
        return [self._view(pool, index, started.get(index)) for index in self._indices(pool)]

    def deaths(self, since: _Index = 0) -> list[DeathReport]:
        """Death reports number ``since`` and on (at most 1000; the launch's reports are numbered from 0: poll with
        ``since`` + the number seen)."""
        return list(self._table.deaths)[since : since + MAX_DEATHS_PER_CALL]

    def lost_hosts(self) -> dict[str, str]:
        """Hosts whose agent was lost, and why."""
        return dict(self._table.lost_hosts)

    async def restart_cell(self, pool: _Pool, index: _Index, deadline_s: _Deadline | None = None) -> CellView:
        """Stop the cell (dead or alive) and start it again on its planned hosts; its view once ready."""
        self._check(pool, [index])
        async with self._lock(pool, index):
            info = await asyncio.to_thread(self._control.restart_cell, pool, index, deadline_s=deadline_s)
        return self._view(pool, index, info)

    async def start_cells(
        self, pool: _Pool, indices: _Indices | None = None, deadline_s: _Deadline | None = None
    ) -> list[CellView]:
        """Start stopped cells (all of the pool by default); their views once ready. A started cell is refused:
        restart it instead."""
        wanted = self._check(pool, indices)
        running = sorted(cell.index for cell in self._table.cells(pool) if cell.index in wanted)
        if running:
            raise ProviderApiError(f"pool {pool!r}: cells {running} are started; restart_cell replaces one")
        locks = [self._lock(pool, index) for index in wanted]
        for lock in locks:
            await lock.acquire()
        try:
            infos = await asyncio.to_thread(self._control.start_cells, pool, wanted, deadline_s=deadline_s)
        finally:
            for lock in locks:
                lock.release()
        return [self._view(pool, info.index, info) for info in infos]

    async def stop_cells(self, pool: _Pool, indices: _Indices | None = None) -> None:
        """Stop cells (all of the pool by default): their process trees are killed on their hosts (a lost host's
        cells are only forgotten)."""
        wanted = self._check(pool, indices, starting=False)
        await asyncio.to_thread(self._control.stop_cells, pool, wanted)

    # ---- helpers ------------------------------------------------------------------------------------------------

    def _indices(self, pool: str) -> list[int]:
        return [cell.index for cell in self._table.plan.cells(pool)]

    def _check(self, pool: str, indices: list[int] | None, *, starting: bool = True) -> list[int]:
        """The indices asked for (all by default); refuses unknown pools and cells, and starting cells of lost
        hosts."""
        self._table.cells(pool)  # UnknownPool, naming the pools
        known = self._indices(pool)
        wanted = known if indices is None else sorted(set(indices))
        unknown = [i for i in wanted if i not in known]
        if unknown:
            raise ProviderApiError(f"pool {pool!r} has no cells {unknown} (its cells are 0..{len(known) - 1})")
        lost = self._table.lost_hosts if starting else {}
        for cell in self._table.plan.cells(pool):
            hosts = {w.host for w in cell.workers if w.host in lost}
            if cell.index in wanted and hosts:
                host = sorted(hosts)[0]
                raise ProviderApiError(
                    f"cell {cell.cell_id}: host {host!r} is lost ({lost[host]}); its cells cannot be started there "
                    "until the host is back (serve with the other cells meanwhile)"
                )
        return wanted

    def _lock(self, pool: str, index: int) -> asyncio.Lock:
        return self._locks.setdefault((pool, index), asyncio.Lock())

    def _view(self, pool: str, index: int, info: CellInfo | None) -> CellView:
        placement = next(c for c in self._table.plan.cells(pool) if c.index == index)
        restarts = self._table.restarts.get(placement.cell_id, 0)
        lost = sorted({w.host for w in placement.workers} & set(self._table.lost_hosts))
        if info is None:
            return CellView(
                pool=pool, index=index, cell_id=placement.cell_id, state="stopped", host=placement.master_host,
                hosts=[w.host for w in placement.workers], address=None, ports={}, pid=None, restarts=restarts,
                death_reason=None, workers=[], lost_hosts=lost,
            )  # fmt: skip
        with self._table.cond:
            state = "alive" if info.alive else "dead" if info.death_reason else "starting"
            workers = [_worker_view(w, w.host in self._table.lost_hosts) for w in info.workers]
            return CellView(
                pool=pool, index=index, cell_id=info.cell_id, state=state, host=workers[0].host,
                hosts=[w.host for w in workers], address=workers[0].address, ports=workers[0].ports,
                pid=workers[0].pid, restarts=restarts, death_reason=info.death_reason, workers=workers,
                lost_hosts=lost,
            )  # fmt: skip


def _worker_view(worker: WorkerInfo, host_lost: bool) -> WorkerView:
    return WorkerView(
        worker_id=worker.worker_id, kind=worker.kind, host=worker.host, address=worker.address,
        ports=dict(worker.ports), pid=worker.pid, state=worker.state.value, gpu_ids=list(worker.gpu_ids),
        error=worker.error, log_path=worker.log_path, host_lost=host_lost,
    )  # fmt: skip


def serve_provider_api(provider: ProviderService, *, curve_dir: str | None, open_bind: bool) -> ServiceServer:
    """Serve ``provider`` with the launch's keys (``curve_dir``), on every interface when ``open_bind`` (its SSH hosts
    must reach it: with CURVE on, or ``allow_open_binds_without_curve``), else on loopback.

    Only holders of the launch's client key get through, as for every actor (with CURVE off, whoever reaches its
    port)."""
    try:
        return serve_service(
            provider, "provider-api", curve_dir=curve_dir, open_bind=open_bind, what="the provider API"
        )
    except (OSError, RuntimeError) as exc:
        raise LauncherError(f"cannot serve the provider API: {exc}") from None


class ServesProviderApi(Protocol):
    """Where the provider API is served (the launch services): its server, and the launcher's address as each SSH
    host reaches it."""

    @property
    def provider_api(self) -> ServiceServer | None: ...  # None until the provider's connect() serves it

    @property
    def reach_back(self) -> Mapping[str, str]: ...


def address_for(services: ServesProviderApi, host: str | None) -> dict[str, Any]:
    """The provider API's address (``{"endpoint", "server_key"}``) for a process on ``host`` (None: the launcher's
    host). A serve worker whose spec lists ``plan_kwargs = ["provider_api"]`` gets it as the constructor kwarg
    ``provider_api``."""
    api = services.provider_api
    if api is None:
        raise ProviderApiError("the provider API is not served (the provider's connect() starts it)")
    reach = services.reach_back.get(host, "127.0.0.1") if host is not None else "127.0.0.1"
    return api.address(reach).as_dict()


def connect(
    address: ServiceAddress | dict[str, Any], *, curve_dir: CurveDir = FROM_ENV, deadline_s: float = CALL_DEADLINE_S
) -> ActorHandle:
    """A handle to the provider API at ``address`` (``{"endpoint", "server_key"}``, or a ServiceAddress): each call
    waits ``deadline_s`` (start and restart calls: their ``deadline_s``, or 300 s, on top) and raises
    ProviderApiError naming the endpoint when it does not get through. ``curve_dir``: the launch's client keys
    (default: ``MILES_CURVE_DIR``, which the launcher sets everywhere; None: plain TCP).

    Its methods are called as any actor's, arguments checked before the wire: ``await api.cells(pool)``,
    ``api.pools().result()``."""
    parsed = address if isinstance(address, ServiceAddress) else ServiceAddress.from_dict(address)
    if parsed is None:
        raise ValueError(
            f"provider API address {str(address)[:200]!r}: expected {{'endpoint': 'tcp://host:port', "
            "'server_key': key or None}} (the launcher fills it: plan_kwargs = ['provider_api'])"
        )

    def deadline(method: str, kwargs: dict[str, Any]) -> float:
        if method not in ("restart_cell", "start_cells"):
            return deadline_s
        return deadline_s + (kwargs.get("deadline_s") or DEFAULT_START_WAIT_S)

    def unavailable(method: str, exc: Exception) -> ProviderApiError:
        return ProviderApiError(
            f"the provider API at {parsed.endpoint} did not answer {method}: is the launcher still running, "
            f"and can this host reach it? ({exc})"
        )

    policy = CallPolicy(deadline_s=deadline, unavailable=unavailable)
    return connect_service(parsed, ProviderService, name="provider-api", policy=policy, curve_dir=curve_dir)


def from_env() -> ActorHandle | None:
    """A handle to the provider API ``MILES_PROVIDER_API`` names (a command job), if set."""
    text = os.environ.get(PROVIDER_API_ENV, "")
    if not text:
        return None
    address = ServiceAddress.from_json(text)
    if address is None:
        raise ValueError(
            f"{PROVIDER_API_ENV}={text[:200]!r} is not a provider API address: expected JSON "
            '{"endpoint": "tcp://host:port", "server_key": "<z85 key>" or null} (the launcher sets it)'
        )
    return connect(address)
