"""The server's record of calls: dedupe by call id + request fingerprint, results until acked, tombstones.

A call is recorded when its SUBMIT is accepted and keeps its encoded result until the client ACKs it; then only
a small tombstone remains, so a late duplicate SUBMIT is recognised and never runs again. Results never
acknowledged are expired by a timer after ``result_ttl_s``. Stored bytes (arguments of queued calls and
results) count against ``memory_budget_bytes``: past it, new calls are refused with an over-capacity error.
Budgets are also per peer (``max_calls_per_peer``, ``memory_budget_per_peer_bytes``), so one caller that never
acknowledges cannot lock the others out; control-plane calls (health, stats, object fetches) have a reserve of
their own on top of ``max_calls`` (``control_reserve_calls``), so a full store never silences health checks.
The store is changed from the event loop and from lane threads (which record results): a lock guards changes.
"""

from __future__ import annotations

import collections
import enum
import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from transport import shared_memory
from transport.codec import Buffer

DEFAULT_RESULT_TTL_S = 12 * 3600.0
DEFAULT_TOMBSTONE_TTL_S = 600.0
DEFAULT_MAX_TOMBSTONES = 100_000  # ~25 MB at most; late duplicates older than this are not expected
DEFAULT_MEMORY_BUDGET_BYTES = 4 * 1024**3
DEFAULT_MAX_CALLS = 100_000
DEFAULT_CONTROL_RESERVE_CALLS = 256


class CallState(enum.Enum):
    RUNNING = "running"
    DONE = "done"


class Tombstone(enum.Enum):
    ACKED = "acked"
    EXPIRED = "expired"


@dataclass(slots=True)
class CallRecord:
    """One call the server has accepted."""

    call_id: bytes
    fingerprint: bytes
    method: str
    peer: bytes
    state: CallState = CallState.RUNNING
    result: list[Buffer] | None = None
    nbytes: int = 0
    finished_at: float = 0.0
    shm_ok: bool = False  # the caller shares this machine: large results may go through shared memory
    shared: list[str] = field(default_factory=list)  # shared-memory files holding the result
    refused: bool = False  # refused before it ran (bad arguments, deadline passed): its id is not used up


@dataclass
class StoreLimits:
    """Budgets of one actor's call store."""

    result_ttl_s: float = DEFAULT_RESULT_TTL_S
    tombstone_ttl_s: float = DEFAULT_TOMBSTONE_TTL_S
    max_tombstones: int = DEFAULT_MAX_TOMBSTONES
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES
    max_calls: int = DEFAULT_MAX_CALLS
    max_calls_per_peer: int = DEFAULT_MAX_CALLS // 2
    memory_budget_per_peer_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES // 2
    control_reserve_calls: int = DEFAULT_CONTROL_RESERVE_CALLS


@dataclass
class CallStore:
    """Calls by id, their tombstones, and the bytes they hold."""

    limits: StoreLimits = field(default_factory=StoreLimits)
    records: dict[bytes, CallRecord] = field(default_factory=dict)
    tombstones: collections.OrderedDict[bytes, tuple[Tombstone, float]] = field(default_factory=collections.OrderedDict)
    nbytes: int = 0
    expired_total: int = 0
    peer_calls: collections.Counter[bytes] = field(default_factory=collections.Counter)
    peer_bytes: collections.Counter[bytes] = field(default_factory=collections.Counter)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: Deletes shared-memory files of results that are gone; the server hands this to its loop (freeing a
    #: large file takes milliseconds, which should not delay the thread that handled an ACK).
    release_files: Callable[[list[str]], None] = field(default=shared_memory.unlink, repr=False)

    def lookup(self, call_id: bytes) -> CallRecord | Tombstone | None:
        record = self.records.get(call_id)
        if record is not None:
            return record
        tomb = self.tombstones.get(call_id)
        return tomb[0] if tomb is not None else None

    def capacity_problem(self, incoming_bytes: int, peer: bytes, *, control: bool = False) -> str | None:
        """Why a new call of ``incoming_bytes`` from ``peer`` cannot be accepted now, or None. ``control``
        calls may also use the reserve above ``max_calls`` and are not held to the per-peer call budget."""
        limits = self.limits
        max_calls = limits.max_calls + (limits.control_reserve_calls if control else 0)
        if len(self.records) >= max_calls:
            return (
                f"{len(self.records)} calls are unacknowledged or running (limit max_calls="
                f"{limits.max_calls}); wait for results or raise the limit"
            )
        if not control and self.peer_calls[peer] >= limits.max_calls_per_peer:
            return (
                f"this caller has {self.peer_calls[peer]} calls unacknowledged or running (limit "
                f"max_calls_per_peer={limits.max_calls_per_peer}); wait for results or raise the limit"
            )
        if self.nbytes + incoming_bytes > limits.memory_budget_bytes:
            return (
                f"over capacity: the call store holds {self.nbytes} bytes and this call brings {incoming_bytes}, "
                f"over memory_budget_bytes={limits.memory_budget_bytes}; fetch and acknowledge results, "
                "free object refs, or raise the budget"
            )
        if self.peer_bytes[peer] + incoming_bytes > limits.memory_budget_per_peer_bytes:
            return (
                f"over capacity: this caller's calls hold {self.peer_bytes[peer]} bytes and this one brings "
                f"{incoming_bytes}, over memory_budget_per_peer_bytes={limits.memory_budget_per_peer_bytes}; "
                "fetch and acknowledge results, or raise the budget"
            )
        return None

    def add(self, record: CallRecord, incoming_bytes: int) -> None:
        with self.lock:
            record.nbytes = incoming_bytes
            self.nbytes += incoming_bytes
            self.records[record.call_id] = record
            self.peer_calls[record.peer] += 1
            self.peer_bytes[record.peer] += incoming_bytes

    def finish(self, record: CallRecord, result: list[Buffer], now: float) -> bool:
        """Keep ``result`` (frames) until acknowledged; argument bytes are released. False if the call was
        forgotten meanwhile (expired, or refused before it ran): nobody waits for its result."""
        size = sum(memoryview(frame).nbytes for frame in result)
        with self.lock:
            forgotten = self.records.get(record.call_id) is not record
            if not forgotten:
                self.nbytes += size - record.nbytes
                self.peer_bytes[record.peer] += size - record.nbytes
                record.nbytes = size
                record.result = result
                record.finished_at = now
                record.state = CallState.DONE  # last: a reader that sees DONE finds the result
        if forgotten and record.shared:
            self.release_files(record.shared)
        return not forgotten

    def ack(self, call_id: bytes, peer: bytes, now: float) -> bool:
        """Drop a finished call's result, leaving a tombstone, if ``peer`` made the call; returns whether anything
        was freed."""
        with self.lock:
            record = self.records.get(call_id)
            if record is None or record.state is not CallState.DONE or record.peer != peer:
                return False
            self._bury(record, Tombstone.ACKED, now)
        if record.shared:
            self.release_files(record.shared)
        return True

    def expire(self, now: float) -> int:
        """Free results older than the TTL and tombstones past theirs; returns how many results expired."""
        cutoff = now - self.limits.result_ttl_s
        with self.lock:
            stale = [r for r in self.records.values() if r.state is CallState.DONE and r.finished_at <= cutoff]
            for record in stale:
                self._bury(record, Tombstone.EXPIRED, now)
            self.expired_total += len(stale)
            files = [name for record in stale for name in record.shared]
            tomb_cutoff = now - self.limits.tombstone_ttl_s
            while self.tombstones:
                _, (_, buried_at) = next(iter(self.tombstones.items()))
                if buried_at > tomb_cutoff and len(self.tombstones) <= self.limits.max_tombstones:
                    break
                self.tombstones.popitem(last=False)
        if files:
            self.release_files(files)
        return len(stale)

    def _bury(self, record: CallRecord, why: Tombstone, now: float) -> None:
        del self.records[record.call_id]
        self._release(record)
        self.tombstones[record.call_id] = (why, now)

    def _release(self, record: CallRecord) -> None:
        """Take ``record``'s bytes and call off the totals (under the lock)."""
        self.nbytes -= record.nbytes
        peer = record.peer
        self.peer_bytes[peer] -= record.nbytes
        self.peer_calls[peer] -= 1
        if self.peer_calls[peer] <= 0:  # keep the counters as small as the set of callers with calls
            del self.peer_calls[peer], self.peer_bytes[peer]

    def forget(self, record: CallRecord) -> None:
        """Remove a call that failed before running (no tombstone: resending it may succeed)."""
        with self.lock:
            if self.records.pop(record.call_id, None) is not None:
                self._release(record)

    def stats(self) -> dict[str, Any]:
        running = sum(1 for r in list(self.records.values()) if r.state is CallState.RUNNING)
        return {
            "calls": len(self.records),
            "running": running,
            "unacked_results": len(self.records) - running,
            "bytes": self.nbytes,
            "tombstones": len(self.tombstones),
            "expired_total": self.expired_total,
        }


def request_fingerprint(method: str, body: Buffer, buffers: list[Buffer]) -> bytes:
    """What identifies a request besides its call id: the method, the body, and the sizes of its buffers."""
    digest = hashlib.blake2b(method.encode(), digest_size=16)
    digest.update(body)
    for buffer in buffers:
        digest.update(memoryview(buffer).nbytes.to_bytes(8, "little"))
    return digest.digest()
