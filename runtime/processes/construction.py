"""Constructing an actor in a running worker: ``attach`` (the launcher's way in) and the steps ``spawn`` shares."""

from __future__ import annotations

import asyncio
from typing import Any

from runtime.actor.call_store import StoreLimits
from runtime.caller.client import ClientRuntime
from runtime.caller.handle import ActorHandle, ActorOwner
from runtime.caller.handle_names import checked_class_info
from runtime.core.control_auth import SpawnTicket
from runtime.core.errors import ActorDied, RemoteError, remote_error
from runtime.core.metadata import ActorClassInfo
from runtime.names import naming
from runtime.processes.process import ActorProcess
from runtime.processes.spawn_checks import DEFAULT_SPAWN_DEADLINE_S, class_and_ref, construct_options
from transport.security import FROM_ENV, CurveDir


async def construct(
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
    under ``name`` (whoever held it: the launcher names its cells). Options: see :func:`attach_worker_async`.

    A launcher starts ``python -m runtime.worker`` on a host itself and reads its ready line first; this sends
    ``__prepare__``, then ``__construct__``, both proved with the worker's spawn ticket
    (:mod:`runtime.core.control_auth`). ``spawn`` does the same through :func:`attach_worker_async` after starting
    the process locally, watching it so that a death during construction names its exit."""
    handle = await attach_worker_async(endpoint, actor_class, **options)
    if options.get("name"):
        await naming.register_name_async(options["name"], handle)
    return handle


def attach(endpoint: str, actor_class: type | str, **options: Any) -> ActorHandle:
    """Blocking :func:`attach_async`."""
    deadline = options.get("deadline_s", DEFAULT_SPAWN_DEADLINE_S)
    return ClientRuntime.get().run(
        attach_async(endpoint, actor_class, **options),
        timeout_s=deadline + 5,
        what=f"attach {actor_class!r} at {endpoint}",
    )


async def attach_worker_async(
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
    owner: ActorOwner | None = None,
) -> ActorHandle:
    """Construct ``actor_class(**kwargs)`` inside the empty worker at ``endpoint``; returns its handle.

    ``ticket``: the spawn ticket the worker read on its stdin when it was started (:mod:`runtime.core.control_auth`):
    its token proves the construct call (the returned handle keeps it, so its owner can later shut the actor
    down) and its public key is the one the actor must prove with CURVE.
    ``watch``: the worker's process, when this process started it: if it exits during construction, this fails at
    once with ActorDied naming its exit code (or signal) and its last output lines. Without it, a worker that
    dies is seen by the connection's link watch (ActorDied within about a second, without the exit code).
    ``owner``: what stops the actor, when this process started it (the returned handle holds it).
    """
    cls, ref = class_and_ref(actor_class)
    info: ActorClassInfo | None = None
    if cls is not None:
        info = checked_class_info(cls, concurrency_groups)
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
    options = construct_options(name, concurrency_groups, max_concurrency, limits)
    watcher = _ConstructionWatch(bootstrap, watch) if watch is not None else None
    try:
        built = await construct(bootstrap, ref, kwargs, options, deadline_s, label)
    except ActorDied as exc:
        if watcher is None:
            raise
        raise await watcher.explain(exc) from None
    finally:
        if watcher is not None:
            watcher.stop()
    return handle_from_record(
        endpoint, built, info=info, curve_dir=curve_dir, spawn_token=ticket.token, owner=owner, **liveness
    )


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
