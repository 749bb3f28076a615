"""Starting actors: ``spawn`` (a local process, restarted when it dies), ``spawn_many``, and ``connect`` (an actor
already running at an endpoint, e.g. a fresh handle after another holder's actor restarted)."""

from __future__ import annotations

import asyncio
import difflib
import functools
import inspect
import os
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec

from runtime.actor.call_store import StoreLimits
from runtime.caller.client import ClientRuntime
from runtime.caller.connection import Connection
from runtime.caller.handle import ActorHandle
from runtime.caller.handle_names import checked_class_info
from runtime.names import naming
from runtime.placement import placement_api
from runtime.placement.placed_spawn import spawn_placed_async
from runtime.placement.placement_types import Grant, ResourceRequest
from runtime.processes import driver_fork, driver_server
from runtime.processes.construction import attach_worker_async, construct, handle_from_record
from runtime.processes.process import ActorProcess
from runtime.processes.spawn_checks import (
    DEFAULT_SPAWN_DEADLINE_S,
    check_spawn_options,
    class_and_ref,
    construct_options,
)
from runtime.processes.spawn_names import live_holder, taken
from runtime.processes.supervisor import Supervisor
from transport import security
from transport.security import CURVE_DIR_ENV, FROM_ENV, CurveDir

P = ParamSpec("P")


async def spawn_async(
    actor_class: type | str,
    *,
    kwargs: dict[str, Any] | None = None,
    name: str | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    concurrency_groups: dict[str, int] | None = None,
    max_concurrency: int | None = None,
    limits: StoreLimits | None = None,
    deadline_s: float = DEFAULT_SPAWN_DEADLINE_S,
    max_restarts: int = 0,
    curve_dir: CurveDir = FROM_ENV,
    metrics_port: int | None = 0,
    namespace: str = naming.DEFAULT_NAMESPACE,
    get_if_exists: bool = False,
    lifetime: str | None = None,
    resources: dict[str, float] | None = None,
    host: str | None = None,
    placement: ResourceRequest | None = None,
    lease: Grant | None = None,
) -> ActorHandle:
    """Start an actor process (here, or on a host of the launch) and construct ``actor_class(**kwargs)`` in it.

    The process runs ``python -m runtime.worker`` (forked by this process's fork server,
    :mod:`runtime.processes.driver_fork`, else started with subprocess: :mod:`runtime.processes.process`); the actor
    is constructed as a launcher's ``attach`` does (:mod:`runtime.processes.construction`).

    ``max_restarts``: when the process exits unexpectedly (also inside its constructor), start it again on the same
    endpoint and re-run the constructor with the same kwargs, at most this many times (-1: no limit); the handle
    keeps working, calls in flight fail with ActorRestarted (:mod:`runtime.processes.supervisor`); copies of the
    handle sent elsewhere stay pinned to their incarnation (``follow_restart()`` moves them on). ``curve_dir``: the
    cluster's CURVE keys (default: ``MILES_CURVE_DIR`` when set; None: plain TCP; :mod:`transport.security`), passed
    on to the process as ``MILES_CURVE_DIR`` so the actors it spawns and calls use the same keys. ``metrics_port``:
    port of the actor's Prometheus ``/metrics`` (0: any free port, kept
    across restarts; None: no metrics endpoint).
    ``name``/``namespace``: register the actor for ``get_actor`` (:mod:`runtime.names.naming`); a name a live actor
    holds raises ValueError, unless ``get_if_exists=True``, which returns a handle to that actor (nothing is spawned).
    ``max_concurrency``: default-lane threads of an actor without async methods, else its concurrent coroutines.
    ``lifetime="detached"``: the actor does not die with this process (its owner), only with the process this one
    lives no longer than (the driver, or the launch's host agent); default None: it dies with its owner.

    Inside a launch (miles-launch), ``resources`` (``{"GPU": 1, "CPU": 2}``) and ``host`` place the actor on any host
    of it that has them free, with ``CUDA_VISIBLE_DEVICES`` set to its GPUs (:mod:`runtime.placement`;
    ``placement=ResourceRequest(...)`` says more: spread, a soft host, waiting for room); nothing fits: refused at
    once (PlacementRefused, saying what is short). ``kill()`` or this process's end returns what it held.
    ``lease``: a lease reserved already (runtime.ray_compat reserves in ``.remote()``, to refuse there).
    """
    check_spawn_options(max_restarts, lifetime, name, namespace)
    request = _placement_request(resources, host, placement, max_restarts, metrics_port, lease)
    stale = None
    if name is not None:
        holder, stale = await live_holder(name, namespace, curve_dir)
        if holder is not None:
            if get_if_exists:
                return holder
            raise taken(name, namespace, holder)
    cls, ref = class_and_ref(actor_class)
    if cls is not None:
        checked_class_info(cls, concurrency_groups)  # refuse bad classes before forking
    label = name or (cls.__name__ if cls is not None else str(actor_class))
    kwargs = dict(kwargs) if kwargs else None  # restarts re-run the constructor with these, as given now
    if curve_dir is FROM_ENV and env and CURVE_DIR_ENV in env:
        curve_dir = env[CURVE_DIR_ENV] or None
    if request is not None:
        handle = await spawn_placed_async(
            actor_class, request, lease=lease, label=label, kwargs=kwargs, name=name, cwd=cwd,
            env={key: value for key, value in (env or {}).items() if key != CURVE_DIR_ENV},  # the launch's keys there
            concurrency_groups=concurrency_groups, max_concurrency=max_concurrency, limits=limits,
            deadline_s=deadline_s, curve_dir=curve_dir, metrics=metrics_port is not None,
            detached=lifetime == "detached",
        )  # fmt: skip
        return await _claim_name(handle, name, namespace, stale, get_if_exists, curve_dir)
    curve = security.resolve(curve_dir)  # refuse missing or unsafe keys before forking
    child_env = {
        **(env or {}),
        CURVE_DIR_ENV: curve.directory if curve is not None else "",
        **naming.child_env(),  # its own spawns and get_actor use this tree's names
        **placement_api.child_env(),  # and it asks the same launch about its hosts
    }
    detached = lifetime == "detached"
    options = construct_options(name, concurrency_groups, max_concurrency, limits)

    bound = [driver_server.bind_address(curve is not None)]  # named actors on a launch's host: others reach them

    def start(bind: str | None = None, **more: Any) -> ActorProcess:
        return ActorProcess(label, env=child_env, cwd=cwd, bind=bind or bound[0], detached=detached, **more)

    async def first(process: ActorProcess) -> ActorHandle:
        ready = await process.wait_ready_async(deadline_s)
        bound.append(ready["endpoint"])  # a restart binds the same address again
        return await attach_worker_async(
            driver_server.advertised(ready["endpoint"]), actor_class, ticket=process.ticket, kwargs=kwargs, name=name,
            concurrency_groups=concurrency_groups, max_concurrency=max_concurrency, limits=limits,
            deadline_s=deadline_s, host=ready["host"], curve_dir=curve_dir, watch=process, owner=supervisor,
        )  # fmt: skip

    def launch(on_exit: Callable[[int], None]) -> ActorProcess:
        port = None if metrics_port is None else (handle.metrics_port or metrics_port)
        return start(
            bound[-1], metrics_port=port, on_exit=[on_exit],
            server_keys=supervisor.process.ticket.server_keys,  # the same actor keys: handles given out stay valid
        )  # fmt: skip

    async def reconstruct(new: ActorProcess, restarts: int, conn: Connection) -> dict[str, Any]:
        ready = await new.wait_ready_async(deadline_s)
        if ready["endpoint"] != bound[-1]:
            raise RuntimeError(f"the new process bound {ready['endpoint']}, not {bound[-1]}")
        bootstrap = ActorHandle(
            endpoint=handle.endpoint, name=label, class_path=str(ref)[:200], boot_id=None, host=ready["host"],
            pid=0, connection=conn, spawn_token=new.ticket.token,
        )  # fmt: skip
        again = {**options, "name": handle.actor_name, "restarts": restarts}  # the same name in logs and metrics
        return await construct(bootstrap, ref, kwargs, again, deadline_s, label)

    supervisor = Supervisor(
        label=label, max_restarts=max_restarts, launch=launch, construct=reconstruct, curve=curve,
        on_restarted=naming.refresh,  # get_actor hands out the new incarnation
    )  # fmt: skip
    await driver_fork.prepare_async()  # the first spawn of this process starts its fork server
    handle = await supervisor.start_first(lambda: start(metrics_port=metrics_port), first)
    return await _claim_name(handle, name, namespace, stale, get_if_exists, curve_dir)


async def _claim_name(
    handle: ActorHandle,
    name: str | None,
    namespace: str,
    stale: dict[str, Any] | None,
    get_if_exists: bool,
    curve_dir: CurveDir,
) -> ActorHandle:
    """Register the new actor's name; when another spawn took it meanwhile, kill this one (and return the other's
    handle with ``get_if_exists``)."""
    if name is not None:
        holder = await naming.claim_async(name, handle, namespace, replacing=stale)
        if holder is not None:
            handle.kill()
            if get_if_exists:
                return ActorHandle(**holder, curve_dir=curve_dir)
            raise taken(name, namespace, holder)
    return handle


def _placement_request(
    resources: dict[str, float] | None,
    host: str | None,
    placement: ResourceRequest | None,
    max_restarts: int,
    metrics_port: int | None,
    lease: Grant | None,
) -> ResourceRequest | None:
    """What to ask the launch for, when the actor is placed by it (None: a local spawn)."""
    if placement is not None and (resources is not None or host is not None):
        raise ValueError("spawn: give resources=/host= or placement=ResourceRequest(...), not both")
    if lease is not None:
        placement = placement or ResourceRequest()
    if placement is None and resources is None and host is None:
        return None
    if max_restarts != 0:
        raise ValueError(
            "spawn: max_restarts with resources=/host=/placement= is not supported yet; restart a placed actor by "
            "spawning it again (its handle raises ActorDied when it ends)"
        )
    if metrics_port not in (0, None):
        raise ValueError(
            f"spawn: a placed actor's metrics port is picked on its host; pass 0 or None, not {metrics_port}"
        )
    if placement is not None:
        return placement
    return ResourceRequest(resources=resources or {}, host=host, near_host=os.environ.get("MILES_HOST") or None)


def _blocking(spawn_coroutine: Callable[P, Awaitable[ActorHandle]]) -> Callable[P, ActorHandle]:
    """``spawn_coroutine`` run to its end from a thread that is not the runtime's loop, with its own signature (a
    typo in an option is a TypeError naming it, and type checkers see every option)."""

    signature = inspect.signature(spawn_coroutine)

    @functools.wraps(spawn_coroutine)
    def blocking(*args: P.args, **kwargs: P.kwargs) -> ActorHandle:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            known = [name for name in signature.parameters if name != "actor_class"]
            close = [m for k in kwargs if k not in signature.parameters for m in difflib.get_close_matches(k, known, 1)]
            hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
            raise TypeError(f"spawn(): {exc}{hint}; its options: {', '.join(known)}") from None
        deadline = kwargs.get("deadline_s", DEFAULT_SPAWN_DEADLINE_S)
        assert isinstance(deadline, int | float)
        what = f"spawn {args[0] if args else kwargs.get('actor_class')!r}"
        return ClientRuntime.get().run(spawn_coroutine(*args, **kwargs), timeout_s=2 * deadline + 5, what=what)

    return blocking


spawn = _blocking(spawn_async)
spawn.__name__ = spawn.__qualname__ = "spawn"
spawn.__doc__ = "Blocking :func:`spawn_async`: the same options, the handle once the actor is constructed."


def spawn_many(
    actor_class: type | str,
    count: int,
    *,
    name_prefix: str | None = None,
    kwargs_each: list[dict[str, Any]] | None = None,
    **options: Any,
) -> list[ActorHandle]:
    """Start ``count`` actors of one class in parallel, all or none (a failure kills the ones started, and the
    error raised, the first actor's, carries a note naming the actors that failed).

    The processes are forked one after the other by this process's fork server (:mod:`runtime.processes.driver_fork`)
    and start, connect and construct concurrently. Names are ``{name_prefix}-{i}`` when a prefix is given.
    ``kwargs_each[i]`` gives actor ``i`` its own constructor arguments (e.g. ranks that must all construct at
    once); else every actor gets ``kwargs``.
    """
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ValueError(f"spawn_many: count must be an int >= 0, got {count!r}")
    if kwargs_each is not None and len(kwargs_each) != count:
        raise ValueError(f"spawn_many: kwargs_each has {len(kwargs_each)} entries for {count} actors")
    if kwargs_each is not None and "kwargs" in options:
        raise ValueError("spawn_many: give kwargs (shared) or kwargs_each (per actor), not both")

    async def all_of() -> list[ActorHandle]:
        jobs = [
            spawn_async(
                actor_class,
                name=f"{name_prefix}-{i}" if name_prefix else None,
                **({"kwargs": kwargs_each[i]} if kwargs_each is not None else {}),
                **options,
            )
            for i in range(count)
        ]
        await driver_fork.prepare_async()  # before the jobs: they then all fork from the fork server
        tasks = [asyncio.ensure_future(job) for job in jobs]
        # The first failure ends the others at once: ranks that construct together would wait for the failed one
        # until their own timeouts (a rendezvous), and all or none start anyway.
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in tasks:
                task.cancel()  # none when all started; a spawn cancelled kills the process it started
        results = await asyncio.gather(*tasks, return_exceptions=True)
        failed = [i for i, r in enumerate(results) if isinstance(r, BaseException) and not tasks[i].cancelled()]
        if not failed:
            return list(results)  # type: ignore[arg-type]
        for handle in results:
            if isinstance(handle, ActorHandle):
                handle.kill()
        first = results[failed[0]]
        assert isinstance(first, BaseException)
        first.add_note(
            f"spawn_many: actor {failed[0]} of {count} ({actor_class!r}) failed; {len(failed)} failed in all "
            f"(indices {failed[:20]}), the {count - len(failed)} others were stopped"
        )
        raise first

    deadline = options.get("deadline_s", DEFAULT_SPAWN_DEADLINE_S)
    return ClientRuntime.get().run(all_of(), timeout_s=2 * deadline + 5, what=f"spawn {count} x {actor_class!r}")


async def connect_async(
    endpoint: str, *, deadline_s: float = 10.0, curve_dir: CurveDir = FROM_ENV, server_key: str | None = None
) -> ActorHandle:
    """A handle to an already constructed actor at ``endpoint``; with CURVE, ``server_key`` is the actor's public
    key (``handle.server_key`` of a handle to it), which it must prove."""
    probe = ActorHandle(
        endpoint=endpoint, name=endpoint, class_path="?", boot_id=None, host="", pid=0, curve_dir=curve_dir,
        server_key=server_key,
    )  # fmt: skip
    health = await probe.method("__health__").options(deadline_s=deadline_s)()
    if not health["constructed"]:
        raise RuntimeError(
            f"the worker at {endpoint} holds no actor yet; use runtime.internals.attach() to construct one"
        )
    return handle_from_record(endpoint, health, curve_dir=curve_dir)


def connect(
    endpoint: str, *, deadline_s: float = 10.0, curve_dir: CurveDir = FROM_ENV, server_key: str | None = None
) -> ActorHandle:
    """Blocking :func:`connect_async`."""
    return ClientRuntime.get().run(
        connect_async(endpoint, deadline_s=deadline_s, curve_dir=curve_dir, server_key=server_key),
        timeout_s=deadline_s + 5,
        what=f"connect to {endpoint}",
    )
