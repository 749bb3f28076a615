"""Starting actors: ``spawn`` (a local process), ``attach`` (construct in a running worker), ``connect``.

``attach`` is what launchers use: they start ``python -m runtime.worker`` on a host themselves, read its ready
line, then ask it to construct the actor. ``spawn`` does both steps locally with subprocess, and can restart
the process when it dies (``max_restarts``, see :mod:`runtime.supervisor`).

Security: every function takes ``curve_dir`` (default: ``MILES_CURVE_DIR`` when set; None: plain TCP), the
directory of the cluster's CURVE keys (:mod:`transport.security`). A spawned process gets it as
``MILES_CURVE_DIR``, so the actors it spawns and calls use the same keys.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import cloudpickle

from runtime import driver_server, name_registry, naming
from runtime.builtin_methods import resolve_class
from runtime.call_store import StoreLimits
from runtime.client import ClientRuntime
from runtime.connection import Connection
from runtime.control_auth import SpawnTicket
from runtime.errors import ActorDied, RemoteError, remote_error
from runtime.handle import ActorHandle
from runtime.metadata import ActorClassInfo, class_info, class_path
from runtime.process import ActorProcess
from runtime.spawn_names import live_holder, taken
from runtime.supervisor import Supervisor, check_max_restarts, start_first
from transport import security
from transport.security import CURVE_DIR_ENV, FROM_ENV, CurveDir

DEFAULT_SPAWN_DEADLINE_S = 60.0


def _class_and_ref(actor_class: type | str) -> tuple[type | None, str | bytes]:
    """The class (if importable here) and how the worker will find it: a dotted path, or cloudpickle by value."""
    if isinstance(actor_class, str):
        try:
            return resolve_class(actor_class), actor_class
        except ImportError:
            return None, actor_class  # importable only on the actor's host: the worker checks it
    if not inspect.isclass(actor_class):
        raise TypeError(f"actor_class must be a class or 'package.module:ClassName', got {actor_class!r}")
    if actor_class.__module__ == "__main__" or "<locals>" in actor_class.__qualname__:
        return actor_class, cloudpickle.dumps(actor_class)
    return actor_class, class_path(actor_class)


def _options(
    name: str | None,
    concurrency_groups: dict[str, int] | None,
    max_concurrency: int | None,
    limits: StoreLimits | None,
) -> dict[str, Any]:
    return {
        "name": name,
        "concurrency_groups": concurrency_groups or {},
        "max_concurrency": max_concurrency,
        "limits": vars(limits) if limits else None,
    }


async def _construct(
    bootstrap: ActorHandle,
    ref: str | bytes,
    kwargs: dict[str, Any] | None,
    options: dict[str, Any],
    deadline_s: float,
    label: str,
) -> dict[str, Any]:
    """``__prepare__`` then ``__construct__`` through ``bootstrap``; returns the construct record."""
    try:
        await bootstrap.method("__prepare__").options(deadline_s=deadline_s)(ref, options["concurrency_groups"])
        return await bootstrap.method("__construct__").options(deadline_s=deadline_s)(ref, kwargs or {}, options)
    except RemoteError as exc:
        raise remote_error(
            f"constructing {label} failed: {exc.remote_message}",
            site=exc.site,
            remote_type=exc.remote_type,
            remote_traceback=exc.remote_traceback,
        ) from None


def handle_from_record(endpoint: str, record: dict[str, Any], **extra: Any) -> ActorHandle:
    """A handle to the incarnation described by ``__construct__``'s or ``__health__``'s record."""
    return ActorHandle(
        endpoint=endpoint,
        name=record["name"],
        class_path=record["class_path"],
        boot_id=record["boot_id"],
        host=record["host"],
        pid=record["pid"],
        machine_id=record["machine_id"],
        metrics_port=record.get("metrics_port"),
        server_key=record.get("server_key"),
        **extra,
    )


async def attach_async(endpoint: str, actor_class: type | str, **options: Any) -> ActorHandle:
    """Construct ``actor_class(**kwargs)`` inside the empty worker at ``endpoint``; returns its handle, registered
    under ``name`` (whoever held it: the launcher names its cells). Options: see :func:`_attach_async`."""
    handle = await _attach_async(endpoint, actor_class, **options)
    if options.get("name"):
        await naming.register_name_async(options["name"], handle)
    return handle


async def _attach_async(
    endpoint: str,
    actor_class: type | str,
    *,
    ticket: SpawnTicket,
    kwargs: dict[str, Any] | None = None,
    name: str | None = None,
    concurrency_groups: dict[str, int] | None = None,
    max_concurrency: int | None = None,
    limits: StoreLimits | None = None,
    deadline_s: float = DEFAULT_SPAWN_DEADLINE_S,
    host: str = "",
    liveness_timeout_s: float | None = None,
    curve_dir: CurveDir = FROM_ENV,
    watch: ActorProcess | None = None,
) -> ActorHandle:
    """Construct ``actor_class(**kwargs)`` inside the empty worker at ``endpoint``; returns its handle.

    ``ticket``: the spawn ticket the worker read on its stdin when it was started (:mod:`runtime.control_auth`):
    its token proves the construct call (the returned handle keeps it, so its owner can later shut the actor
    down) and its public key is the one the actor must prove with CURVE.
    ``watch``: the worker's process, when this process started it: if it exits during construction, this fails at
    once with ActorDied naming its exit code (or signal) and its last output lines. Without it, a worker that
    dies is seen by the connection's link watch (ActorDied within about a second, without the exit code).
    """
    cls, ref = _class_and_ref(actor_class)
    info: ActorClassInfo | None = None
    if cls is not None:
        info = class_info(cls, tuple(sorted((concurrency_groups or {}).items())))
    label = name or (cls.__name__ if cls is not None else str(ref))
    liveness = {"liveness_timeout_s": liveness_timeout_s} if liveness_timeout_s else {}
    bootstrap = ActorHandle(
        endpoint=endpoint,
        name=label,
        class_path=str(ref)[:200],
        boot_id=None,
        host=host,
        pid=0,
        curve_dir=curve_dir,
        spawn_token=ticket.token,
        server_key=ticket.server_keys.public.decode(),
        **liveness,
    )
    options = _options(name, concurrency_groups, max_concurrency, limits)
    watcher = _ConstructionWatch(bootstrap, watch) if watch is not None else None
    try:
        built = await _construct(bootstrap, ref, kwargs, options, deadline_s, label)
    except ActorDied as exc:
        if watcher is None:
            raise
        raise await watcher.explain(exc) from None
    finally:
        if watcher is not None:
            watcher.stop()
    return handle_from_record(endpoint, built, info=info, curve_dir=curve_dir, spawn_token=ticket.token, **liveness)


class _ConstructionWatch:
    """While the actor is constructed, an exit of its process fails the construction at once, naming the exit code
    (or signal) and the last output lines; the connection's link watch leaves the death to it, as it knows more."""

    _EXIT_AFTER_GOODBYE_S = 2.0  # an actor that said it leaves (SystemExit) exits within this

    def __init__(self, bootstrap: ActorHandle, process: ActorProcess) -> None:
        self.process = process
        self.report: str | None = None
        self._bootstrap = bootstrap
        self._conn = bootstrap.connection
        self._conn.exit_watched = True
        self._remove = process.when_exited(self._exited)

    def _exited(self, code: int) -> None:
        self.report = self.process.exit_report(code, " while the actor was being constructed")
        self._bootstrap.mark_dead(self.report)

    async def explain(self, exc: ActorDied) -> ActorDied:
        """The error to raise for ``exc``: an actor that said it is leaving (SystemExit in its constructor) before
        its process exited gets the exit report too, once the exit comes."""
        report = self.report
        if report is None:
            wait = self.process.wait_exited
            code = await asyncio.get_running_loop().run_in_executor(None, wait, self._EXIT_AFTER_GOODBYE_S)
            if code is None:
                return exc
            report = self.process.exit_report(code, " while the actor was being constructed")
        if report in str(exc):
            return exc
        said = str(exc).removeprefix(f"{exc.site}: ") if exc.site is not None else str(exc)
        return ActorDied(f"{report}\nbefore it left, the actor said: {said}", site=exc.site)

    def stop(self) -> None:
        self._remove()
        self._conn.exit_watched = False  # a supervisor that watches on says so itself


def attach(endpoint: str, actor_class: type | str, **options: Any) -> ActorHandle:
    """Blocking :func:`attach_async`."""
    deadline = options.get("deadline_s", DEFAULT_SPAWN_DEADLINE_S)
    return ClientRuntime.get().run(
        attach_async(endpoint, actor_class, **options),
        timeout_s=deadline + 5,
        what=f"attach {actor_class!r} at {endpoint}",
    )


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
) -> ActorHandle:
    """Start a local actor process and construct ``actor_class(**kwargs)`` in it.

    ``max_restarts``: when the process exits unexpectedly (also inside its constructor), start it again on the same
    endpoint and re-run the constructor with the same kwargs, at most this many times (-1: no limit); the handle
    keeps working, calls in flight fail with ActorRestarted (:mod:`runtime.supervisor`). ``curve_dir``: CURVE keys
    (see the module doc). ``metrics_port``: port of the actor's Prometheus ``/metrics`` (0: any free port, kept
    across restarts; None: no metrics endpoint).
    ``name``/``namespace``: register the actor for ``get_actor`` (:mod:`runtime.naming`); a name a live actor holds
    raises ValueError, unless ``get_if_exists=True``, which returns a handle to that actor (nothing is spawned).
    ``max_concurrency``: default-lane threads of an actor without async methods, else its concurrent coroutines.
    ``lifetime="detached"``: the actor does not die with this process (its owner), only with the process this one
    lives no longer than (the driver, or the launch's host agent); default None: it dies with its owner.
    """
    check_max_restarts(max_restarts)
    if lifetime not in (None, "detached", "non_detached"):
        raise ValueError(f"lifetime must be None, 'non_detached' or 'detached', got {lifetime!r}")
    if name is not None:
        name_registry.check_name("name", name)
    if namespace:
        name_registry.check_name("namespace", namespace)
    stale = None
    if name is not None:
        holder, stale = await live_holder(name, namespace, curve_dir)
        if holder is not None:
            if get_if_exists:
                return holder
            raise taken(name, namespace, holder)
    cls, ref = _class_and_ref(actor_class)
    if cls is not None:
        class_info(cls, tuple(sorted((concurrency_groups or {}).items())))  # refuse bad classes before forking
    label = name or (cls.__name__ if cls is not None else str(actor_class))
    kwargs = dict(kwargs) if kwargs else None  # restarts re-run the constructor with these, as given now
    if curve_dir is FROM_ENV and env and CURVE_DIR_ENV in env:
        curve_dir = env[CURVE_DIR_ENV] or None
    curve = security.resolve(curve_dir)  # refuse missing or unsafe keys before forking
    child_env = {
        **(env or {}),
        CURVE_DIR_ENV: curve.directory if curve is not None else "",
        **naming.child_env(),  # its own spawns and get_actor use this tree's names
    }
    detached = lifetime == "detached"
    options = _options(name, concurrency_groups, max_concurrency, limits)

    bound = [driver_server.bind_address(curve is not None)]  # named actors on a launch's host: others reach them

    def start(bind: str | None = None, **more: Any) -> ActorProcess:
        return ActorProcess(label, env=child_env, cwd=cwd, bind=bind or bound[0], detached=detached, **more)

    async def first(process: ActorProcess) -> ActorHandle:
        ready = await asyncio.get_running_loop().run_in_executor(None, process.wait_ready, deadline_s)
        bound.append(ready["endpoint"])  # a restart binds the same address again
        return await _attach_async(
            driver_server.advertised(ready["endpoint"]), actor_class, ticket=process.ticket, kwargs=kwargs, name=name,
            concurrency_groups=concurrency_groups, max_concurrency=max_concurrency, limits=limits,
            deadline_s=deadline_s, host=ready["host"], curve_dir=curve_dir, watch=process,
        )  # fmt: skip

    process, handle, exits = await start_first(start, first, label, max_restarts, metrics_port)
    handle.process = process

    def launch(on_exit: Callable[[int], None]) -> ActorProcess:
        port = None if metrics_port is None else (handle.metrics_port or metrics_port)
        return start(
            bound[-1], metrics_port=port, on_exit=[on_exit],
            server_keys=process.ticket.server_keys,  # the same actor keys: handles given out stay valid
        )  # fmt: skip

    async def construct(new: ActorProcess, restarts: int, conn: Connection) -> dict[str, Any]:
        ready = await asyncio.get_running_loop().run_in_executor(None, new.wait_ready, deadline_s)
        if ready["endpoint"] != bound[-1]:
            raise RuntimeError(f"the new process bound {ready['endpoint']}, not {bound[-1]}")
        bootstrap = ActorHandle(
            endpoint=handle.endpoint, name=label, class_path=str(ref)[:200], boot_id=None, host=ready["host"],
            pid=0, connection=conn, spawn_token=new.ticket.token,
        )  # fmt: skip
        again = {**options, "name": handle.actor_name, "restarts": restarts}  # the same name in logs and metrics
        return await _construct(bootstrap, ref, kwargs, again, deadline_s, label)

    handle.supervisor = Supervisor(
        handle, process, label=label, max_restarts=max_restarts, launch=launch, construct=construct, curve=curve,
        previous_exits=exits,
    )  # fmt: skip
    if name is not None:
        holder = await naming.claim_async(name, handle, namespace, replacing=stale)
        if holder is not None:  # another spawn took the name meanwhile
            handle.kill()
            if get_if_exists:
                return ActorHandle(**holder, curve_dir=curve_dir)
            raise taken(name, namespace, holder)
    return handle


def spawn(actor_class: type | str, **options: Any) -> ActorHandle:
    """Blocking :func:`spawn_async`."""
    deadline = options.get("deadline_s", DEFAULT_SPAWN_DEADLINE_S)
    return ClientRuntime.get().run(
        spawn_async(actor_class, **options), timeout_s=2 * deadline + 5, what=f"spawn {actor_class!r}"
    )


def spawn_many(
    actor_class: type | str,
    count: int,
    *,
    name_prefix: str | None = None,
    kwargs_each: list[dict[str, Any]] | None = None,
    **options: Any,
) -> list[ActorHandle]:
    """Start ``count`` actors of one class in parallel, all or none (a failure kills the ones started).

    Names are ``{name_prefix}-{i}`` when a prefix is given. ``kwargs_each[i]`` gives actor ``i`` its own
    constructor arguments (e.g. ranks that must all construct at once); else every actor gets ``kwargs``.
    """
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
        results = await asyncio.gather(*jobs, return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            for handle in results:
                if isinstance(handle, ActorHandle):
                    handle.kill()
            raise failures[0]
        return list(results)

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
        raise RuntimeError(f"the worker at {endpoint} holds no actor yet; use attach() to construct one")
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
