"""Object refs: the producer keeps the value, consumers fetch it straight from the owner, ``free`` is explicit.

In any process, ``put(value)`` stores the value in that process and returns a small ObjectRef (the owner's
handle plus a key): inside an actor the actor owns it; a driver (or any other process) starts serving its refs
at its first ``put`` (:mod:`runtime.driver_server`) and serves them while it lives. Any process holding the ref
calls ``ref.get()`` (or ``await ref.get_async()``), which fetches it from the owner with one call (arrays and
tensors travel zero-copy, or through shared memory on one machine). ``ref.free()`` drops it. If the owner dies,
``get`` raises ActorDied.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import TYPE_CHECKING, Any

from transport.type_registry import register_type

if TYPE_CHECKING:
    from runtime.actor_server import ActorServer
    from runtime.handle import ActorHandle


@dataclasses.dataclass(frozen=True)
class ObjectRef:
    """A reference to a value held by the actor ``owner``."""

    owner: ActorHandle
    key: str

    def get(self, timeout: float | None = 60.0) -> Any:
        """The value (blocking)."""
        return self.owner.method("__object_get__")(self.key).result(timeout=timeout)

    async def get_async(self) -> Any:
        return await self.owner.method("__object_get__")(self.key)

    def free(self, timeout: float | None = 10.0) -> bool:
        """Drop the value at the owner; returns whether it was still there."""
        return bool(self.owner.method("__object_free__")(self.key).result(timeout=timeout))

    def __str__(self) -> str:
        return f"ObjectRef({self.owner.actor_name}:{self.key})"


class ObjectStore:
    """The values this actor process owns, by key."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._lock = threading.Lock()

    def put(self, value: Any) -> str:
        key = os.urandom(16).hex()  # unguessable: holding the ref is what grants access
        with self._lock:
            self._values[key] = value
        return key

    def get(self, key: str) -> Any:
        with self._lock:
            if key not in self._values:
                raise KeyError(f"object {key} is not held here (freed, or never put); {len(self._values)} held")
            return self._values[key]

    def free(self, key: str) -> bool:
        with self._lock:
            return self._values.pop(key, None) is not None

    def __len__(self) -> int:
        return len(self._values)


_server: ActorServer | None = None
store = ObjectStore()


def bind_server(server: ActorServer) -> None:
    """Called once by the actor process: refs made here name this actor as their owner."""
    global _server
    _server = server


def serving() -> bool:
    """Whether this process serves object refs (it is an actor, or a driver that already put one)."""
    return _server is not None


def put(value: Any) -> ObjectRef:
    """Keep ``value`` in this process and return a ref to it (as Ray's ``ray.put``); in a driver, the first call
    starts serving refs (a loopback socket, or every interface with CURVE and ``MILES_ADVERTISE_HOST``)."""
    if _server is None:
        from runtime import driver_server

        driver_server.ensure_serving()
    if _server.info is None:
        raise RuntimeError("runtime.put() in an actor process: call it from a method, once the actor is constructed")
    from runtime.handle import ActorHandle

    owner = ActorHandle(
        endpoint=_server.public_address, name=_server.name, class_path=_server.info.path, boot_id=_server.boot_id,
        host=_server.host, pid=_server.pid, machine_id=_server.machine_id,
        server_key=_server.server_keys.public.decode(),
    )  # fmt: skip
    return ObjectRef(owner, store.put(value))


register_type(ObjectRef)
