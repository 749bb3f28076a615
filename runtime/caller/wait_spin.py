"""A thread blocked on a result reads replies off the socket itself (:func:`wait_here`): how long it polls the socket
before it sleeps, and when it does at all."""

from __future__ import annotations

import concurrent.futures
import os
import time
from typing import Any

from transport.endpoints import ZmqEndpoint
from transport.waker import Waker

_WAIT_SLICE_S = 1.0  # a waiting thread looks again at least this often, whatever woke it or not


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
#: A waiting thread spins only if the actor answered this recently. Polling catches a reply that comes within
#: microseconds with no wake-up (on a virtual machine a wake-up costs tens of microseconds); it only pays right after a
#: result: an actor silent for longer has gone to sleep and takes longer to wake than the spin lasts, and on a small
#: machine the spinning core is one its threads need.
SPIN_AFTER_RESULT_S = 0.0003


def wait_here(
    socket: ZmqEndpoint, future: concurrent.futures.Future[Any], timeout_s: float | None, last_result_at: float
) -> None:
    """Block this (non-loop) thread until ``future`` is settled or ``timeout_s`` passes, reading replies off
    ``socket`` here: the reply then wakes this thread directly, not the loop thread and then this one.
    ``last_result_at``: when the actor last answered (monotonic), which decides whether to spin."""
    waker = Waker.for_this_thread()
    future.add_done_callback(waker.wake)  # settled by another thread (the loop, a death, a timer)
    now = time.monotonic()
    until = None if timeout_s is None else now + timeout_s
    spin_s = WAIT_SPIN_S if now - last_result_at < SPIN_AFTER_RESULT_S else 0.0
    while not future.done() and not socket.closed:
        slice_s = _WAIT_SLICE_S if until is None else min(_WAIT_SLICE_S, until - time.monotonic())
        if slice_s <= 0:
            return
        socket.receive_here(slice_s, waker, spin_s=spin_s)
