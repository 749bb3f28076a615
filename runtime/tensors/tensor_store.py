"""The tensors behind this process's device-resident refs, by key, until every reader has freed them (the owner
sends them from here, uncopied, when a holder pulls: :mod:`runtime.tensors.tensor_transfer`)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TensorEntry:
    tensors: dict[str, Any]  # name -> torch.Tensor, contiguous, in the ref's order
    group: str
    readers_left: int
    failure: BaseException | None = None
    sends: int = field(default=0)
    pulled_by: set[int] = field(default_factory=set)  # the ranks it was sent to


Watch = Callable[[str, TensorEntry], BaseException | None]  # a reason to stop waiting for ``key``'s readers
WATCH_S = 0.25


class TensorStore:
    """The tensors this process owns for device-resident refs (``runtime.put(..., transport="collective",
    readers=N)``); each ``ref.free()`` counts one reader off and the entry goes when all ``readers`` have."""

    def __init__(self) -> None:
        self._entries: dict[str, TensorEntry] = {}
        self._changed = threading.Condition()
        self._version = 0  # bumped on every change waiters care about

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
                self._version += 1
                self._changed.notify_all()
            return True

    def fail(self, key: str, error: BaseException) -> None:
        """A transfer of ``key`` failed for good (its receiver died): waiters raise ``error``."""
        with self._changed:
            entry = self._entries.get(key)
            if entry is not None and entry.failure is None:
                entry.failure = error
                self._version += 1
                self._changed.notify_all()

    def wait_freed(self, keys: Iterable[str], timeout: float | None, watch: Watch | None = None) -> None:
        """Block until none of ``keys`` is held; raises a recorded transfer failure, what ``watch`` finds (asked
        every WATCH_S, outside the lock, about each held key), or TimeoutError naming the keys still held.

        Lets the owner reuse a bucket safely (Ray: ``ray.experimental.wait_tensor_freed``). A transfer that failed
        because its receiver died is kept on the entry, so this raises it instead of waiting for a free that will
        never come; ``watch`` (:class:`runtime.tensors.member_watch.MemberWatch`) raises when a member of the ref's
        group died while readers are left."""
        wanted = list(keys)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._changed:
                held = self._held(wanted, timeout, deadline)
                if not held:
                    return
                seen = self._version
            for key, entry in held if watch is not None else ():
                error = watch(key, entry)
                if error is not None:
                    with self._changed:
                        if key in self._entries:  # not freed meanwhile
                            raise error
            with self._changed:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if watch is not None:
                    left = WATCH_S if left is None else min(left, WATCH_S)
                if self._version == seen:  # nothing changed since the entries were read
                    self._changed.wait(left)

    def _held(self, wanted: list[str], timeout: float | None, deadline: float | None) -> list[tuple[str, TensorEntry]]:
        """The entries of ``wanted`` still held (lock held); raises a recorded failure, or TimeoutError past the
        deadline naming them (and how many readers each waits for)."""
        held = [(key, self._entries[key]) for key in wanted if key in self._entries]
        for _, entry in held:
            if entry.failure is not None:
                raise entry.failure
        if held and deadline is not None and time.monotonic() >= deadline:
            detail = ", ".join(f"{key} ({entry.readers_left} reader(s) left)" for key, entry in held[:8])
            raise TimeoutError(f"{len(held)} tensor ref(s) not freed within {timeout}s: {detail}")
        return held

    def info(self, key: str) -> dict[str, int] | None:
        """How many readers ``key`` still waits for and how many sends it served, or None once freed."""
        with self._changed:
            entry = self._entries.get(key)
            return None if entry is None else {"readers_left": entry.readers_left, "sends": entry.sends}

    def __len__(self) -> int:
        return len(self._entries)


store = TensorStore()
