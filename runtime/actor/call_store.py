"""The server's record of calls: dedupe by call id + request fingerprint, results until acked, tombstones.

A call never runs twice: its id is remembered (as a record, then a tombstone) so a late duplicate is recognised,
and an id the store may have forgotten is refused (:meth:`CallStore.id_problem`).
"""

from __future__ import annotations

import collections
import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runtime.core.call_ids import CALL_ID_BYTES, order_key
from transport import shared_memory
from transport.codec import Buffer

DEFAULT_RESULT_TTL_S = 12 * 3600.0
DEFAULT_TOMBSTONE_TTL_S = 600.0
DEFAULT_MAX_TOMBSTONES = 100_000  # ~25 MB at most; past it the oldest go, and ids no newer are refused as stale
DEFAULT_MAX_CLOCK_SKEW_S = 60.0
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
    cancelled: bool = False  # its caller cancelled it: if it has not started, it never does
    task: Any = None  # the asyncio task running an async method (what a cancel cancels)


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
    #: How far callers' clocks may differ from this host's: ids made further ahead are refused, and ids older than
    #: ``tombstone_ttl_s - max_clock_skew_s`` are refused as stale.
    max_clock_skew_s: float = DEFAULT_MAX_CLOCK_SKEW_S

    def __post_init__(self) -> None:
        if not self.tombstone_ttl_s > 2 * self.max_clock_skew_s >= 0:
            raise ValueError(
                f"tombstone_ttl_s={self.tombstone_ttl_s} must exceed twice max_clock_skew_s={self.max_clock_skew_s} "
                "(ids older than their difference are refused as stale); raise the TTL or lower the skew"
            )


@dataclass
class CallStore:
    """Calls by id, their tombstones, and the bytes they hold.

    A call is recorded when its SUBMIT is accepted and keeps its encoded result until the client ACKs it; then only
    a small tombstone remains, for ``tombstone_ttl_s`` (at most ``max_tombstones``, oldest dropped first). Results
    never acknowledged are expired by a timer after ``result_ttl_s``. Stored bytes (arguments of queued calls and
    results) are counted in all and per peer, for the budgets of :class:`StoreLimits` (runtime.actor.admission).
    Changed from the event loop and from lane threads (which record results): ``lock`` guards changes.
    """

    limits: StoreLimits = field(default_factory=StoreLimits)
    records: dict[bytes, CallRecord] = field(default_factory=dict)
    tombstones: collections.OrderedDict[bytes, tuple[Tombstone, float]] = field(default_factory=collections.OrderedDict)
    nbytes: int = 0
    expired_total: int = 0
    #: The order key (runtime.core.call_ids.order_key) of the newest id whose tombstone was dropped: no newer id is
    #: accepted unless it is in the store. -1: nothing was dropped yet.
    forgotten_key: int = -1
    crowded_out_total: int = 0  # tombstones dropped before their TTL because max_tombstones was reached
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

    def id_problem(self, call_id: bytes, now: float) -> str | None:
        """Why a new call may not use ``call_id`` (unknown to :meth:`lookup`) at ``now`` (unix seconds), or None.

        Call ids carry the time they were made (runtime.core.call_ids). Refused: an id no newer than the newest one
        dropped, or older than ``tombstone_ttl_s - max_clock_skew_s`` by this host's clock; and one made more than
        ``max_clock_skew_s`` ahead of it (a caller whose clock runs ahead would otherwise outlive its tombstones).

        Call it after :meth:`lookup` found nothing: a tombstone's key joins ``forgotten_key`` before it is dropped,
        so an id dropped between the two is refused here."""
        if len(call_id) != CALL_ID_BYTES:
            return (
                f"a call id is {CALL_ID_BYTES} bytes made by runtime.core.call_ids (a random prefix, then the time it "
                f"was made), got {len(call_id)} bytes; the call was not run"
            )
        limits = self.limits
        key = order_key(call_id)
        age_s = now - (key >> 16) / 1000  # the key is the time made (ms) and a 16-bit counter
        skew_s = limits.max_clock_skew_s
        if -skew_s <= age_s <= limits.tombstone_ttl_s - skew_s and key > self.forgotten_key:
            return None  # the common case, decided first
        if age_s < -skew_s:
            return (
                f"the call id was made {-age_s:.1f} s in the future by this actor's clock, more than max_clock_skew_s="
                f"{skew_s}; the caller's clock runs ahead: synchronise the clocks (NTP). Not run"
            )
        if age_s > limits.tombstone_ttl_s - skew_s:
            return (
                f"stale call id: made {age_s:.1f} s ago, older than this actor remembers calls (tombstone_ttl_s="
                f"{limits.tombstone_ttl_s} minus max_clock_skew_s={skew_s}); it may be a late duplicate of a call "
                "that already ran, so it was not run. A new call gets a new id; if this was a new call, the "
                "caller's clock runs behind this host's"
            )
        return (
            "stale call id: made no later than calls this actor has already forgotten (it keeps at most "
            f"max_tombstones={limits.max_tombstones} finished ids, and drops the oldest); it may be a late "
            "duplicate of a call that already ran, so it was not run. A new call gets a new id; raise "
            "max_tombstones if this happens to new calls"
        )

    def add(self, record: CallRecord, incoming_bytes: int) -> None:
        with self.lock:
            record.nbytes = incoming_bytes
            self.nbytes += incoming_bytes
            self.records[record.call_id] = record
            self.peer_calls[record.peer] += 1
            self.peer_bytes[record.peer] += incoming_bytes

    def finish(self, record: CallRecord, result: list[Buffer], now: float) -> bool:
        """Keep ``result`` (frames) until acknowledged; argument bytes are released. False if the call was
        forgotten meanwhile (expired, or refused before it ran) or already answered (the process is leaving and
        told its caller so): nobody waits for this result."""
        size = sum(memoryview(frame).nbytes for frame in result)
        with self.lock:
            forgotten = self.records.get(record.call_id) is not record or record.state is CallState.DONE
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
                call_id, (_, buried_at) = next(iter(self.tombstones.items()))
                if buried_at > tomb_cutoff and len(self.tombstones) <= self.limits.max_tombstones:
                    break
                self.crowded_out_total += buried_at > tomb_cutoff
                self._drop_oldest_tombstone(call_id)
        if files:
            self.release_files(files)
        return len(stale)

    def _bury(self, record: CallRecord, why: Tombstone, now: float) -> None:
        """Replace ``record`` by a tombstone (under the lock). The tombstone goes in first: a reader that looks
        the id up meanwhile (lock-free) finds one or the other, never neither."""
        self.tombstones[record.call_id] = (why, now)
        del self.records[record.call_id]
        self._release(record)
        if len(self.tombstones) > self.limits.max_tombstones:
            self.crowded_out_total += 1
            self._drop_oldest_tombstone(next(iter(self.tombstones)))

    def _drop_oldest_tombstone(self, call_id: bytes) -> None:
        """Forget the oldest tombstone, ``call_id`` (under the lock): its key joins ``forgotten_key`` first, so
        from then on a SUBMIT with that id (or an older one) is refused by :meth:`id_problem`."""
        if len(call_id) == CALL_ID_BYTES:  # an id of runtime.core.call_ids' form: it has a key
            key = order_key(call_id)
            if key > self.forgotten_key:
                self.forgotten_key = key
        self.tombstones.popitem(last=False)

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
            "tombstones_crowded_out_total": self.crowded_out_total,
        }
