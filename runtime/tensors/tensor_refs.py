"""Device-resident object refs: the tensors stay in the owner; a holder pulls them over a collective group, with no
pickle and no copy through the actor transport. Mirrors Ray Direct Transport (``ray.put(x, _tensor_transport="gloo")``,
``set_target_for_ref``, ``wait_tensor_freed``; Ray's doc/source/ray-core/direct-transport.rst)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from runtime.tensors import tensor_transfer
from runtime.tensors.tensor_specs import MAX_ALLOCATE_BYTES, TensorSpec, total_bytes
from transport.type_registry import register_type

if TYPE_CHECKING:
    from runtime.caller.handle import ActorHandle

SINGLE = ""  # the one name of a ref made from a lone tensor


@dataclasses.dataclass(frozen=True)
class TensorRef:
    """Tensors held by ``owner``, movable over collective group ``group`` (where the owner is ``owner_rank``).

    Made by ``runtime.put(tensors, transport="collective")`` (:mod:`runtime.objects.tensor_put`): the owner's
    handle, a key, the group and each tensor's name, shape and dtype. Pass it to another member of the group like
    any value; there ``ref.get(into=buffers)`` receives the tensors straight into buffers the receiver chose (its
    live weights); ``ref.free()`` tells the owner one reader is done."""

    owner: ActorHandle
    key: str
    group: str
    owner_rank: int
    specs: tuple[TensorSpec, ...]
    single: bool = False  # made from one tensor: get() takes and returns a tensor, not a dict

    def get(self, into: Any = None, timeout: float = 60.0, max_bytes: int = MAX_ALLOCATE_BYTES) -> Any:
        """The tensors, received into ``into`` (a dict like the ref's, or a tensor for a lone one; checked against
        the ref's names, shapes and dtypes before any byte moves) or into fresh buffers of at most ``max_bytes``
        in all. Call it in a member of ``group``. Raises ActorDied if the owner dies meanwhile."""
        buffers = {SINGLE: into} if self.single and into is not None else into
        got = tensor_transfer.receive(self.owner, self.key, self.group, self.owner_rank, self.specs, buffers, timeout,
                                      max_bytes)  # fmt: skip
        return got[SINGLE] if self.single else got

    async def get_async(self, into: Any = None, timeout: float = 60.0, max_bytes: int = MAX_ALLOCATE_BYTES) -> Any:
        """:meth:`get` from async code (it runs on a thread: the receive blocks)."""
        return await asyncio.to_thread(self.get, into, timeout, max_bytes)

    def free(self, timeout: float | None = 10.0) -> bool:
        """One reader is done (the owner drops the tensors when all its readers are); False if already gone."""
        return bool(self.owner.method("__tensor_free__")(self.key).result(timeout=timeout))

    @property
    def nbytes(self) -> int:
        return total_bytes(list(self.specs))

    @property
    def names(self) -> list[str]:
        return [spec.name for spec in self.specs]

    def __str__(self) -> str:
        return f"TensorRef({self.owner.actor_name}:{self.key}, {len(self.specs)} tensor(s) over {self.group!r})"


register_type(TensorRef)
