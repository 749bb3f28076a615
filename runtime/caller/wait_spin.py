"""How long a thread blocked on a result polls the socket before it sleeps, and when it does at all.

Polling catches a reply that comes within microseconds with no wake-up (on a virtual machine a wake-up costs tens
of microseconds). It only pays right after a result: an actor silent for longer has gone to sleep and takes longer
to wake than the spin lasts, and on a small machine the spinning core is one its threads need.
"""

from __future__ import annotations

import os


def _wait_spin_s() -> float:
    """``MILES_WAIT_SPIN_US``: how long a thread blocked on a result polls the socket before it sleeps."""
    text = os.environ.get("MILES_WAIT_SPIN_US", "200")
    try:
        micros = float(text)
    except ValueError:
        micros = -1.0
    if not 0 <= micros <= 1e6:
        raise ValueError(f"MILES_WAIT_SPIN_US must be microseconds between 0 (never spin) and 1000000, got {text!r}")
    return micros / 1e6


WAIT_SPIN_S = _wait_spin_s()
#: A waiting thread spins only if the actor answered this recently (see the module docstring).
SPIN_AFTER_RESULT_S = 0.0003
