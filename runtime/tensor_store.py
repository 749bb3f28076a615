"""The tensors behind this process's device-resident refs, by key, until every reader has freed them.

``runtime.put(tensors, transport="collective", readers=N)`` keeps the tensors here, uncopied
(:mod:`runtime.tensor_put`); the owner sends them from here when a holder of the ref pulls
(``__tensor_send__``, :mod:`runtime.tensor_transfer`). Each ``ref.free()`` counts one reader off; the entry goes
when all ``readers`` have freed it. :meth:`TensorStore.wait_freed` lets the owner reuse a bucket safely (Ray:
``ray.experimental.wait_tensor_freed``). A transfer that failed because its receiver died is kept on the entry,
so ``wait_freed`` raises it instead of waiting for a free that will never come.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TensorEntry:
    tensors: dict[str, Any]  # name -> torch.Tensor, contiguous, in the ref's order
    group: str
    readers_left: int
    failure: BaseException | None = None
    sends: int = field(default=0)


class TensorStore:
    """The tensors this process owns for device-resident refs."""

    def __init__(self) -> None:
        self._entries: dict[str, TensorEntry] = {}
        self._changed = threading.Condition()

    def put(self, tensors: dict[str, Any], group: str, readers: int) -> str:
        key = os.urandom(16).hex()  # unguessable: holding the ref is what grants access
        with self._changed:
            self._entries[key] = TensorEntry(tensors, group, readers)
        return key

    def get(self, key: str) -> TensorEntry:
        with self._changed:
            entry = self._entries.get(key)
            if entry is None:
                raise KeyError(f"tensor ref {key} is not held here (freed, or never put); {len(self._entries)} held")
            entry.sends += 1
            return entry

    def free(self, key: str) -> bool:
        """One reader is done; the tensors go when the last one is. Returns whether the key was held."""
        with self._changed:
            entry = self._entries.get(key)
            if entry is None:
                return False
            entry.readers_left -= 1
            if entry.readers_left <= 0:
                del self._entries[key]
                self._changed.notify_all()
            return True

    def fail(self, key: str, error: BaseException) -> None:
        """A transfer of ``key`` failed for good (its receiver died): waiters raise ``error``."""
        with self._changed:
            entry = self._entries.get(key)
            if entry is not None and entry.failure is None:
                entry.failure = error
                self._changed.notify_all()

    def wait_freed(self, keys: Iterable[str], timeout: float | None) -> None:
        """Block until none of ``keys`` is held; raises a recorded transfer failure, or TimeoutError naming the keys
        still held (and how many readers each waits for)."""
        wanted = list(keys)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while True:
                held = [(key, self._entries[key]) for key in wanted if key in self._entries]
                for _, entry in held:
                    if entry.failure is not None:
                        raise entry.failure
                if not held:
                    return
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    detail = ", ".join(f"{key} ({entry.readers_left} reader(s) left)" for key, entry in held[:8])
                    raise TimeoutError(f"{len(held)} tensor ref(s) not freed within {timeout}s: {detail}")
                self._changed.wait(left)

    def info(self, key: str) -> dict[str, int] | None:
        """How many readers ``key`` still waits for and how many sends it served, or None once freed."""
        with self._changed:
            entry = self._entries.get(key)
            return None if entry is None else {"readers_left": entry.readers_left, "sends": entry.sends}

    def __len__(self) -> int:
        return len(self._entries)


store = TensorStore()
