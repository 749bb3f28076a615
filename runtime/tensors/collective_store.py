"""A collective group's rendezvous store, kept by rank 0 and reached over the actor transport: torch's TCPStore
would be one more port, on every interface, answering anyone unauthenticated; this one rides the actor transport's
CURVE authentication with no new listener."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from runtime.caller.handle import ActorHandle

MAX_KEY_BYTES = 4096
MAX_VALUE_BYTES = 1 << 20
MAX_TABLE_BYTES = 16 << 20  # gloo and NCCL keep addresses and ids of some hundred bytes per rank
CALL_S = 10.0  # one store operation on rank 0 (a dict lookup; the margin is for a loaded machine)
POLL_FIRST_S, POLL_MAX_S = 0.0005, 0.02
OPS = ("set", "get", "add", "check", "compare_set", "delete_key", "num_keys")


class StoreTable:
    """The keys of one group, in rank 0's process (opened by ``__collective_open__``; rank 0's own store reads it
    directly); every operation returns at once. Keys, values and the total size are bounded (a peer's input)."""

    def __init__(self, group: str) -> None:
        self.group = group
        self._keys: dict[str, bytes] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def apply(self, op: str, args: list[Any]) -> Any:
        """Run ``op`` (one of :data:`OPS`) on ``args`` from a member; bad arguments raise ValueError naming them."""
        if op not in OPS:
            raise ValueError(f"collective group {self.group!r} store: unknown operation {op!r} (one of {list(OPS)})")
        if not isinstance(args, list) or len(args) > 3:
            raise ValueError(f"collective group {self.group!r} store: {op} takes at most 3 arguments")
        with self._lock:
            return getattr(self, "_" + op)(*args)

    def _set(self, key: Any, value: Any) -> None:
        self._put(self._key(key), self._value(value))

    def _get(self, key: Any) -> bytes | None:
        return self._keys.get(self._key(key))

    def _add(self, key: Any, amount: Any) -> int:
        key = self._key(key)
        if not isinstance(amount, int) or isinstance(amount, bool):
            raise ValueError(f"collective group {self.group!r} store: add amount {amount!r} is not an int")
        try:
            total = int(self._keys.get(key, b"0")) + amount
        except ValueError:
            raise ValueError(f"collective group {self.group!r} store: key {key!r} does not hold a number") from None
        self._put(key, str(total).encode())
        return total

    def _check(self, keys: Any) -> bool:
        if not isinstance(keys, list) or len(keys) > 65536:
            raise ValueError(f"collective group {self.group!r} store: check takes a list of at most 65536 keys")
        return all(self._key(key) in self._keys for key in keys)

    def _compare_set(self, key: Any, expected: Any, desired: Any) -> bytes:
        key, expected, desired = self._key(key), self._value(expected), self._value(desired)
        current = self._keys.get(key)
        if (current is None and expected == b"") or current == expected:
            self._put(key, desired)
            return desired
        return expected if current is None else current

    def _delete_key(self, key: Any) -> bool:
        key = self._key(key)
        value = self._keys.pop(key, None)
        if value is not None:
            self._bytes -= len(key) + len(value)
        return value is not None

    def _num_keys(self) -> int:
        return len(self._keys)

    def _put(self, key: str, value: bytes) -> None:
        old = self._keys.get(key)
        size = self._bytes + len(value) - (len(old) if old is not None else -len(key))
        if size > MAX_TABLE_BYTES:
            raise ValueError(f"collective group {self.group!r} store: full ({MAX_TABLE_BYTES >> 20} MiB)")
        self._keys[key], self._bytes = value, size

    def _key(self, key: Any) -> str:
        if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_BYTES:
            raise ValueError(f"collective group {self.group!r} store: a key is a str of 1..{MAX_KEY_BYTES} chars")
        return key

    def _value(self, value: Any) -> bytes:
        if not isinstance(value, bytes) or len(value) > MAX_VALUE_BYTES:
            raise ValueError(f"collective group {self.group!r} store: a value is bytes of at most {MAX_VALUE_BYTES}")
        return value


def local_asker(table: StoreTable) -> Callable[[str, list[Any]], Any]:
    """Rank 0's way to its own table."""
    return table.apply


def remote_asker(rank0: ActorHandle, group: str) -> Callable[[str, list[Any]], Any]:
    """A member's way to rank 0's table: one ``__collective_store__`` call per operation."""
    method = rank0.method("__collective_store__").options(deadline_s=CALL_S)

    def ask(op: str, args: list[Any]) -> Any:
        return method(group, op, args).result(timeout=CALL_S + 5)

    return ask


def actor_store(group: str, ask: Callable[[str, list[Any]], Any]) -> Any:
    """A ``torch.distributed.Store`` over ``ask`` (torch is imported here, in members only).

    torch.distributed needs it to make a group (gloo's ranks swap their addresses, NCCL its unique ids, also later,
    when a communicator is made lazily); each operation is a ``__collective_store__`` call to rank 0. Operations
    never block rank 0: a ``get`` or ``wait`` on a key not set yet is polled here (backing off from 0.5 to 20 ms)
    until the store's timeout, then fails naming the keys, as TCPStore does; a dead rank 0 fails it with ActorDied
    at once."""
    import torch.distributed as dist

    class ActorStore(dist.Store):
        """torch.distributed's store interface over rank 0's :class:`StoreTable`."""

        def set(self, key: str, value: bytes | str) -> None:
            ask("set", [key, _bytes(value)])

        def get(self, key: str) -> bytes:
            return self._wait_for(lambda: ask("get", [key]), [key])

        def add(self, key: str, amount: int) -> int:
            return int(ask("add", [key, int(amount)]))

        def check(self, keys: list[str]) -> bool:
            return bool(ask("check", [list(keys)]))

        def wait(self, keys: list[str], timeout: Any = None) -> None:
            self._wait_for(lambda: True if ask("check", [list(keys)]) else None, list(keys), timeout)

        def compare_set(self, key: str, expected: bytes | str, desired: bytes | str) -> bytes:
            return ask("compare_set", [key, _bytes(expected), _bytes(desired)])

        def delete_key(self, key: str) -> bool:
            return bool(ask("delete_key", [key]))

        def num_keys(self) -> int:
            return int(ask("num_keys", []))

        def _wait_for(self, probe: Callable[[], Any], keys: list[str], timeout: Any = None) -> Any:
            limit = (timeout or self.timeout).total_seconds()
            deadline, pause = time.monotonic() + limit, POLL_FIRST_S
            while (found := probe()) is None:
                if time.monotonic() >= deadline:
                    raise dist.DistStoreError(
                        f"collective group {group!r}: keys {keys[:4]} were not set within {limit:.0f}s (a member "
                        "did not join? create_group names it)"
                    )
                time.sleep(pause)
                pause = min(pause * 2, POLL_MAX_S)
            return found

    return ActorStore()


def _bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)
