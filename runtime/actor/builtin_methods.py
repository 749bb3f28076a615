"""Methods every actor process answers, whatever its class (construct, health, stats, shutdown, cancel, streams),
and the registry where the features above the actor's side (object refs, collective groups) add theirs; their
names start with ``__`` so they never clash with a user's methods."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from runtime.actor.call_store import CallRecord, CallState, CallStore, StoreLimits
from runtime.actor.server_lanes import CONSTRUCT_LANE
from runtime.actor.stream_table import StreamTable, stream_close, stream_next
from runtime.core.class_refs import resolve_class
from runtime.core.metadata import ActorClassInfo, class_info, coerce_constructor_kwargs
from transport import sealed_pickle
from transport.endpoints import ZmqEndpoint
from transport.security import CurveConfig, ServerKeys

log = logging.getLogger(__name__)

_MAX_CANCELS = 1024  # call ids in one __cancel__


class BuiltinHost(Protocol):
    """What the built-in methods need of their server (:class:`runtime.actor.actor_server.ActorServer` is one):
    exactly what the built-ins read and do of it."""

    name: str
    boot_id: str
    pid: int
    host: str
    machine_id: str
    started_at: float
    restarts: int
    metrics_port: int | None
    curve: CurveConfig | None
    server_keys: ServerKeys
    info: ActorClassInfo | None
    instance: Any
    stats: dict[str, int]
    store: CallStore
    endpoint: ZmqEndpoint | None
    streams: StreamTable

    def set_limits(self, limits: StoreLimits) -> None: ...

    def configure(self, info: ActorClassInfo, instance: Any, name: str, max_concurrency: int | None) -> None: ...

    def in_flight(self) -> dict[str, int]: ...

    def lane_failures(self) -> int: ...

    def cancel(self, record: CallRecord) -> str: ...

    async def stop(self) -> None: ...


@dataclass(frozen=True)
class Builtin:
    function: Callable[..., Any]
    lane: str | None = None  # a thread lane of the server's (runtime.actor.server_lanes), else inline on the loop
    is_async: bool = False  # a coroutine function, awaited as a task on the server's loop
    takes_peer: bool = False  # called with the caller's routing id after the server (it may act on its calls only)


def _prepare(server: BuiltinHost, class_ref: str | bytes, groups: dict[str, int]) -> str:
    """Import the class and register the types its constructor and methods name, before ``__construct__``
    arrives: its keyword arguments may hold such types (e.g. a pydantic config)."""
    return class_info(resolve_class(class_ref), tuple(sorted(groups.items()))).path


def _construct(server: BuiltinHost, class_ref: str | bytes, kwargs: dict[str, Any], options: dict[str, Any]) -> dict:
    if server.instance is not None:
        raise RuntimeError(f"actor {server.name!r} is already constructed; spawn a new process for another actor")
    cls = resolve_class(class_ref)
    info = _class_check(cls, options.get("concurrency_groups"))  # a class only this host can import too
    limits = options.get("limits")
    if limits:
        server.set_limits(StoreLimits(**limits))
    name = options.get("name") or f"{cls.__name__}-{os.getpid()}"
    server.restarts = int(options.get("restarts") or 0)
    instance = cls(**coerce_constructor_kwargs(cls, kwargs))
    server.configure(info, instance, name, options.get("max_concurrency"))
    log.info("constructed actor %s (%s) pid=%d boot=%s", name, info.path, os.getpid(), server.boot_id)
    return {
        "boot_id": server.boot_id,
        "pid": server.pid,
        "host": server.host,
        "class_path": info.path,
        "name": name,
        "machine_id": server.machine_id,
        "metrics_port": server.metrics_port,
        "server_key": server.server_keys.public.decode(),
    }


def _health(server: BuiltinHost) -> dict[str, Any]:
    return {
        "name": server.name,
        "class_path": server.info.path if server.info else None,
        "constructed": server.instance is not None,
        "boot_id": server.boot_id,
        "pid": server.pid,
        "host": server.host,
        "machine_id": server.machine_id,
        "uptime_s": time.time() - server.started_at,
        "in_flight": server.in_flight(),
        "store": server.store.stats(),
        "metrics_port": server.metrics_port,
        "restarts": server.restarts,
        "curve": server.curve is not None,
        "server_key": server.server_keys.public.decode(),
    }


def _stats(server: BuiltinHost) -> dict[str, Any]:
    endpoint = server.endpoint.stats
    return {
        **server.stats,
        "store": server.store.stats(),
        "messages_in": endpoint.messages_in,
        "messages_out": endpoint.messages_out,
        "bytes_in": endpoint.bytes_in,
        "bytes_out": endpoint.bytes_out,
        "dropped": dict(endpoint.dropped),
        "lane_failures": server.lane_failures(),
        "connections": server.endpoint.connections(),
        "pickles_refused": dict(sealed_pickle.REFUSED),
    }


def _shutdown(server: BuiltinHost) -> bool:
    """Stop the process shortly after answering."""
    asyncio.get_running_loop().call_later(0.05, lambda: asyncio.ensure_future(server.stop()))
    return True


def _methods(server: BuiltinHost) -> list[str]:
    return sorted(server.info.methods) if server.info else []


def _cancel(server: BuiltinHost, peer: bytes, call_ids: list[bytes]) -> list[str]:
    """Cancel the caller's own calls (``PendingCall.cancel``); another caller's, or a finished one, is left alone.
    Returns what became of each."""
    if not isinstance(call_ids, list) or len(call_ids) > _MAX_CANCELS:
        raise ValueError(f"__cancel__ takes a list of at most {_MAX_CANCELS} call ids")
    outcomes = []
    for call_id in call_ids:
        record = server.store.lookup(call_id) if isinstance(call_id, bytes) else None
        if not isinstance(record, CallRecord) or record.peer != peer:
            outcomes.append("unknown")
        elif record.state is not CallState.RUNNING:
            outcomes.append("finished")
        else:
            outcomes.append(server.cancel(record))
    return outcomes


async def _stream_next(server: BuiltinHost, peer: bytes, *args: Any) -> list[Any]:
    return await stream_next(server.streams, peer, *args)


def _stream_close(server: BuiltinHost, peer: bytes, call_id: bytes) -> bool:
    return stream_close(server.streams, peer, call_id)


BUILTINS: dict[str, Builtin] = {
    "__prepare__": Builtin(_prepare, lane=CONSTRUCT_LANE),
    "__construct__": Builtin(_construct, lane=CONSTRUCT_LANE),
    "__health__": Builtin(_health),
    "__stats__": Builtin(_stats),
    "__shutdown__": Builtin(_shutdown),
    "__methods__": Builtin(_methods),
    "__cancel__": Builtin(_cancel, takes_peer=True),
    "__stream_next__": Builtin(_stream_next, is_async=True, takes_peer=True),
    "__stream_close__": Builtin(_stream_close, takes_peer=True),
}


def register(name: str, builtin: Builtin) -> None:
    """Add a feature's built-in method (object refs, collective groups): every actor process answers it."""
    if not (name.startswith("__") and name.endswith("__")):
        raise ValueError(f"built-in method {name!r} must be named __like_this__ (it must never shadow a user's)")
    if BUILTINS.get(name, builtin) is not builtin:
        raise ValueError(f"built-in method {name!r} is registered twice")
    BUILTINS[name] = builtin


def without_server(function: Callable[..., Any]) -> Callable[..., Any]:
    """A feature's function as a built-in's: it is called with the server first and needs nothing of it."""
    return lambda _server, *args, **kwargs: function(*args, **kwargs)


ClassCheck = Callable[[type, "dict[str, int] | None"], ActorClassInfo]


def _class_info(cls: type, concurrency_groups: dict[str, int] | None) -> ActorClassInfo:
    return class_info(cls, tuple(sorted((concurrency_groups or {}).items())))


_class_check: ClassCheck = _class_info


def set_class_check(check: ClassCheck) -> None:
    """What ``__construct__`` checks a class with besides its metadata: the caller's side refuses a method its
    handles would shadow (runtime.caller.handle_names), which this side cannot know."""
    global _class_check
    _class_check = check
