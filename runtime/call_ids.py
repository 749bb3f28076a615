"""Call ids: 16 bytes, unique per call, made without a system call.

A random 8-byte prefix per process (drawn anew in a forked child) and an 8-byte counter. ``os.urandom`` per
call would release the GIL on every call, and a waiting thread then takes it: a thread switch per call.
"""

from __future__ import annotations

import itertools
import os

_prefix = os.urandom(8)
_counter = itertools.count()  # next() is atomic under the GIL


def _reseed() -> None:
    global _prefix, _counter
    _prefix, _counter = os.urandom(8), itertools.count()


os.register_at_fork(after_in_child=_reseed)


def new_call_id() -> bytes:
    return _prefix + next(_counter).to_bytes(8, "little")
