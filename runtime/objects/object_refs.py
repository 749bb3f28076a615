"""Object refs: the producer keeps the value, consumers fetch it straight from the owner, ``free`` is explicit."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from transport.type_registry import register_type

if TYPE_CHECKING:
    from runtime.caller.handle import ActorHandle


@dataclasses.dataclass(frozen=True)
class ObjectRef:
    """A reference to a value held by the actor ``owner``: the owner's handle plus a key, a small value.

    ``runtime.put(value)`` makes one (:mod:`runtime.objects.object_owner`); the value stays in the owner's store
    (:mod:`runtime.objects.object_store`). Any process holding the ref calls ``ref.get()`` (or ``await
    ref.get_async()``): one call to the owner through the handle (arrays and tensors travel zero-copy, or through
    shared memory on one machine). ``ref.free()`` drops it. If the owner dies, ``get`` raises ActorDied."""

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


register_type(ObjectRef)
