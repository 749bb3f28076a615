"""transport.link_watch without any network: monitor events in, verdicts out, on a fake clock.

The event sequences are the ones libzmq 4.3 emits on a DEALER (seen with a socket monitor): a killed peer gives
DISCONNECTED, CONNECT_RETRIED, then CLOSED + CONNECT_RETRIED per refused reconnect (at 0.1, 0.3, 0.7 s ...); a
live peer whose link dropped gives DISCONNECTED, CONNECT_RETRIED, CONNECTED.
"""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
import zmq

from transport.link_watch import LinkChange, LinkWatch, nothing_listens


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _feed(watch: LinkWatch, clock: Clock, events: list[tuple[float, int]]) -> list[LinkChange]:
    changes = []
    for at, event in events:
        clock.now = 100.0 + at
        change = watch.observe(event, 0)
        if change is not None:
            changes.append(change[0])
    return changes


CONNECTED, DISCONNECTED, CLOSED = zmq.EVENT_CONNECTED, zmq.EVENT_DISCONNECTED, zmq.EVENT_CLOSED
RETRIED, DELAYED = zmq.EVENT_CONNECT_RETRIED, zmq.EVENT_CONNECT_DELAYED


def test_a_killed_peer_is_gone_after_two_refused_reconnects() -> None:
    clock = Clock()
    watch = LinkWatch(clock=clock)
    killed = [(0.0, CONNECTED), (5.0, DISCONNECTED), (5.0, RETRIED), (5.1, DELAYED), (5.1, CLOSED), (5.1, RETRIED)]
    assert _feed(watch, clock, killed) == [LinkChange.LOST]
    clock.now = 105.3
    change = watch.observe(CLOSED, 0)
    assert change is not None and change[0] is LinkChange.GONE and "2 reconnects within 0.30 s" in change[1]
    assert _feed(watch, clock, [(5.7, CLOSED), (6.5, CLOSED)]) == []  # reported once


def test_a_dropped_link_whose_reconnect_lands_is_not_a_death() -> None:
    clock = Clock()
    watch = LinkWatch(clock=clock)
    blip = [(0.0, CONNECTED), (1.0, DISCONNECTED), (1.0, RETRIED), (1.1, CLOSED), (1.2, CONNECTED)]
    assert _feed(watch, clock, blip) == [LinkChange.LOST, LinkChange.BACK]
    # the refusal before the reconnect does not count towards the next drop
    assert _feed(watch, clock, [(9.0, DISCONNECTED), (9.1, CLOSED)]) == [LinkChange.LOST]
    assert _feed(watch, clock, [(9.3, CLOSED)]) == [LinkChange.GONE]


def test_slow_failures_are_timeouts_not_refusals() -> None:
    """A partition: reconnects time out long after the drop; that is no evidence of a death."""
    clock = Clock()
    watch = LinkWatch(clock=clock, window_s=1.5)
    assert _feed(watch, clock, [(0.0, CONNECTED), (1.0, DISCONNECTED), (4.0, CLOSED), (9.0, CLOSED)]) == [
        LinkChange.LOST
    ]


def test_a_busy_peer_emits_nothing() -> None:
    clock = Clock()
    watch = LinkWatch(clock=clock)
    assert _feed(watch, clock, [(0.0, DELAYED), (0.0, CONNECTED)]) == []
    assert not watch.lost


@pytest.mark.parametrize("known_up", [True, False])
def test_refused_first_connects_count_only_for_a_peer_known_to_be_up(known_up: bool) -> None:
    clock = Clock()
    watch = LinkWatch(clock=clock, known_up=known_up)
    changes = _feed(watch, clock, [(0.0, DELAYED), (0.0, CLOSED), (0.1, DELAYED), (0.1, CLOSED)])
    assert changes == ([LinkChange.GONE] if known_up else [])


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="refusals"):
        LinkWatch(refusals=0)


def test_nothing_listens_tells_a_refusal_from_a_listener() -> None:
    """The confirming connect: a refused one proves the listener gone; a listener (even one that never accepts),
    a malformed address or a timeout prove nothing."""

    async def check() -> None:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            port = listener.getsockname()[1]
            assert await nothing_listens(f"tcp://127.0.0.1:{port}") is False
        assert await nothing_listens(f"tcp://127.0.0.1:{port}") is True  # closed now
        name = f"miles-test-link-watch-{os.getpid()}"
        with socket.socket(socket.AF_UNIX) as twin:
            twin.bind("\0" + name)
            twin.listen(1)
            assert await nothing_listens(f"ipc://@{name}") is False
        assert await nothing_listens(f"ipc://@{name}") is True
        assert await nothing_listens("inproc://nowhere") is False

    asyncio.run(check())
