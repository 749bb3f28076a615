"""This process as the owner of object refs: ``runtime.put`` keeps a value here and returns a ref naming it."""

from __future__ import annotations

import concurrent.futures
import os
import threading
from typing import Any

from runtime.actor import builtin_methods
from runtime.actor.actor_server import ActorServer
from runtime.actor.builtin_methods import Builtin, without_server
from runtime.caller.handle import ActorHandle
from runtime.objects.object_refs import ObjectRef
from runtime.objects.object_store import store
from runtime.processes import driver_server
from transport import security

_lock = threading.Lock()
_server: ActorServer | None = None


class DriverObjects:
    """The 'actor' a driver's object refs name as their owner: it has no methods of its own."""


def bind_server(server: ActorServer) -> None:
    """Called once by the actor process: refs made here name this actor as their owner."""
    global _server
    _server = server


def _ensure_serving() -> ActorServer:
    """This process's object-ref server: started here unless it (or an actor server) already serves.

    Inside an actor, the actor owns its refs (the worker binds its server at start, :func:`bind_server`). A driver
    (or any other process) starts, at its first ``put``, an in-process server of :class:`DriverObjects`
    (:mod:`runtime.processes.driver_server`) that serves while the process lives. It binds loopback, or every
    interface when ``MILES_ADVERTISE_HOST`` names this host for other hosts (with CURVE on only, as actors' open
    binds)."""
    global _server
    with _lock:
        if _server is None:
            curve = security.resolve()
            _server = driver_server.start_server(
                DriverObjects(), f"driver-{os.getpid()}", bind=driver_server.bind_address(curve is not None),
                curve=curve, what="start serving this process's object refs",
            )  # fmt: skip
        return _server


def put(value: Any) -> ObjectRef:
    """Keep ``value`` in this process and return a ref to it (as Ray's ``ray.put``); in a driver, the first call
    starts serving refs (a loopback socket, or every interface with CURVE and ``MILES_ADVERTISE_HOST``)."""
    return ObjectRef(owner_handle(), store.put(value))


def put_pending(future: concurrent.futures.Future[Any]) -> ObjectRef:
    """A ref to the value ``future`` will have, kept in this process once it comes (a holder's get waits)."""
    return ObjectRef(owner_handle(), store.put_pending(future))


def restarts() -> int:
    """How often this actor was restarted before this incarnation (0 in a driver, also during construction)."""
    server = _server
    return server.restarts if server is not None else 0


def owner_handle() -> ActorHandle:
    """A handle to this process as the owner of the refs it makes (its actor server, or the driver's)."""
    server = _server if _server is not None else _ensure_serving()
    if server.info is None:
        raise RuntimeError("runtime.put() in an actor process: call it from a method, once the actor is constructed")
    return _handle_of(server)


def _handle_of(server: ActorServer) -> ActorHandle:
    return ActorHandle(
        endpoint=server.public_address, name=server.name, class_path=server.info.path, boot_id=server.boot_id,
        host=server.host, pid=server.pid, machine_id=server.machine_id,
        server_key=server.server_keys.public.decode(),
    )  # fmt: skip


def own_handle() -> tuple[ActorHandle, ActorServer] | None:
    """In an actor process, once constructed: a handle to this actor and its server; else None."""
    server = _server
    if server is None or server.info is None or isinstance(server.instance, DriverObjects):
        return None
    return _handle_of(server), server


builtin_methods.register("__object_get__", Builtin(without_server(store.get_async), is_async=True))
builtin_methods.register("__object_free__", Builtin(without_server(store.free)))
