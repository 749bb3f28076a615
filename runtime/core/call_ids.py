"""Call ids: 16 bytes, unique per call, made without a system call, carrying the time they were made (so an actor
can refuse an id older than it remembers acknowledged calls, ``tombstone_ttl_s``, instead of running it twice)."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable

CALL_ID_BYTES = 16
_PREFIX_BYTES = 8

# Layout: [8 random bytes][6 bytes: milliseconds since the Unix epoch][2 bytes: a counter], both numbers big-endian, so
# the last 8 bytes read as one number (order_key) that grows with the time an id was made. The random prefix is drawn
# once per process (anew in a forked child): os.urandom per call would release the GIL on every call, and a waiting
# thread then takes it, a thread switch per call.
_prefix = os.urandom(_PREFIX_BYTES)
_counter = itertools.count()  # next() is atomic under the GIL
# The monotonic clock anchored to the wall clock at start: a process's ids never go back in time (a wall clock stepped
# back would otherwise repeat millisecond and counter together); 65536 ids in one millisecond would be needed to repeat
# one.
_epoch_ns = time.time_ns() - time.monotonic_ns()  # wall-clock time at monotonic zero, read once


def _reseed() -> None:
    global _prefix, _counter, _epoch_ns
    _prefix, _counter = os.urandom(_PREFIX_BYTES), itertools.count()
    _epoch_ns = time.time_ns() - time.monotonic_ns()


os.register_at_fork(after_in_child=_reseed)


def new_call_id(_now_ns: Callable[[], int] = time.monotonic_ns) -> bytes:
    return _prefix + ((((_now_ns() + _epoch_ns) // 1_000_000) << 16) | (next(_counter) & 0xFFFF)).to_bytes(8, "big")


def made_at_ms(call_id: bytes) -> int | None:
    """When ``call_id`` was made (milliseconds since the epoch, by its maker's clock), or None if it is not an id
    of this form."""
    if len(call_id) != CALL_ID_BYTES:
        return None
    return int.from_bytes(call_id[_PREFIX_BYTES:-2], "big")


def order_key(call_id: bytes) -> int:
    """A number that grows with the time ``call_id`` was made (and, within one millisecond of one process, with
    its counter); only for ids of this form."""
    return int.from_bytes(call_id[_PREFIX_BYTES:], "big")
