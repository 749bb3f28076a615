"""An idle actor costs (almost) nothing, and still answers at once when work comes.

An idle actor's lane thread waits on the socket (it takes the next call with no hand-over), so its event loop
stops reading the socket. Before, the loop looked again every 10 ms for as long as the actor stayed idle: 100
wake-ups a second per actor, which on a host with dozens of actors is a core's worth of noise. Now the thread
that waits for long wakes the loop when it stops waiting (transport.endpoints ``_IDLE_WATCH_S``).
"""

from __future__ import annotations

import time

import psutil
import pytest

from runtime import ActorHandle

pytestmark = pytest.mark.processes

IDLE_S = 2.0
#: Wake-ups per second an idle actor may have (heartbeats, the idle slice of its lane thread, metrics); the
#: 10 ms recheck alone made 100.
MAX_WAKEUPS_PER_S = 40


def _wakeups(process: psutil.Process) -> int:
    """Voluntary context switches of every thread of ``process``: each is a sleep that something ended."""
    return process.num_ctx_switches().voluntary


def test_an_idle_actor_sleeps_and_answers_its_next_calls_from_every_lane(counter: ActorHandle) -> None:
    assert counter.add(1).result(timeout=10) == 11  # constructed, its lane thread now waits on the socket
    process = psutil.Process(counter.pid)
    time.sleep(0.5)  # let the loop reach its longest look-again interval
    before = _wakeups(process)
    time.sleep(IDLE_S)
    per_second = (_wakeups(process) - before) / IDLE_S
    assert per_second < MAX_WAKEUPS_PER_S, f"an idle actor woke {per_second:.0f} times a second"

    # The waiting thread hands the socket back when it leaves: a sync call that keeps it busy must not hold
    # up async calls or the control lane, which the loop reads for (the loop's own next look, up to
    # _IDLE_WATCH_S away, would be too late: three rounds make a lucky timer unlikely).
    for round_ in range(3):
        time.sleep(1.2)  # idle again: the loop stops looking
        busy = counter.sleep(0.5)
        time.sleep(0.05)
        assert counter.async_add(5).result(timeout=0.3) == 16 + 5 * round_
        assert counter.control_thread().result(timeout=0.3)
        assert busy.result(timeout=10) == 0.5
