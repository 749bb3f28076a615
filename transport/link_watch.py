"""Whether a DEALER's peer is gone, from the socket monitor's link events (no traffic of its own).

A process that exits closes its sockets, so its host refuses the reconnects at once: that is the evidence; a live
peer (busy, or behind a partition) is never reported.
"""

from __future__ import annotations

import asyncio
import enum
import socket
import time
from collections.abc import Callable

import zmq

from transport.timeouts import within


class LinkChange(enum.Enum):
    """What the monitor events say about the peer."""

    LOST = "lost"  # the link dropped; ZeroMQ reconnects by itself
    BACK = "back"  # a reconnect reached a listener again
    GONE = "gone"  # refused reconnects followed the drop: nothing listens at the peer's address any more


class LinkWatch:
    """Turns one DEALER's monitor events into :class:`LinkChange`\\ s; ``observe`` runs on the loop.

    ZeroMQ reconnects a DEALER by itself: DISCONNECTED when the link drops, CLOSED for every reconnect attempt that
    failed, CONNECTED when one reaches a listener. A drop followed by ``refusals`` failed reconnects within
    ``window_s``, with no successful one between, means the peer's listener is gone (a TCP reset, or no abstract
    socket of that name any more). A busy peer keeps its link and emits nothing at all.

    ``known_up``: the peer was listening when we were told of it (a handle that names a constructed incarnation),
    so refused first connects count as after a drop. Without it a peer that is not up yet is waited for.
    """

    EVENTS = zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED

    def __init__(
        self,
        *,
        known_up: bool = False,
        # The first reconnect comes 100 ms after the drop and the next ones back off (200, 400 ms ...), so two
        # refusals take about 0.3 s.
        refusals: int = 2,
        window_s: float = 1.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if refusals < 1 or window_s <= 0:
            raise ValueError(f"LinkWatch needs refusals >= 1 and window_s > 0, got {refusals} and {window_s}")
        self.refusals = refusals
        self.window_s = window_s
        self._clock = clock
        self._lost_at: float | None = clock() if known_up else None
        self._refused = 0
        self._reported = False
        self._ever_connected = False

    @property
    def lost(self) -> bool:
        return self._lost_at is not None

    def observe(self, event: int, value: int) -> tuple[LinkChange, str] | None:
        """The change ``event`` makes (with a reason in words), or None."""
        now = self._clock()
        if event == zmq.EVENT_CONNECTED:  # a live peer whose link dropped (proxy restart, ZMTP heartbeat) is back
            was_lost = self._lost_at is not None
            self._lost_at, self._refused, self._reported = None, 0, False
            self._ever_connected = True
            return (LinkChange.BACK, "a reconnect reached the peer") if was_lost else None
        if event == zmq.EVENT_DISCONNECTED:
            if self._lost_at is not None:
                return None
            self._lost_at, self._refused, self._reported = now, 0, False
            return LinkChange.LOST, "the link dropped"
        if event != zmq.EVENT_CLOSED or self._lost_at is None or self._reported:
            return None
        elapsed = now - self._lost_at
        if elapsed > self.window_s:  # slow failures are timeouts (a partition), not a refusal: no evidence
            return None
        self._refused += 1
        if self._refused < self.refusals:
            return None
        self._reported = True
        what = "the link dropped and {} reconnects" if self._ever_connected else "{} connects"
        return (
            LinkChange.GONE,
            what.format(self._refused) + f" within {elapsed:.2f} s were refused (nothing listens at its address)",
        )


async def nothing_listens(address: str, timeout_s: float = 1.0) -> bool:
    """Whether a connect of our own to ``address`` (``tcp://HOST:PORT``, ``ipc://@NAME`` or ``ipc://PATH``) is
    refused, i.e. nothing listens there. A full backlog, a timeout or an unreachable network prove nothing: False.
    A connect that succeeds is closed at once, before any greeting.

    A failed reconnect does not say why it failed, and a live peer's full listen backlog fails a Unix-socket connect
    at once too, so the owner of a DEALER confirms GONE with this connect, whose error it can read, and checks that
    the peer did not answer since the drop (runtime.caller.link_liveness): a refusal is the kernel's word, an
    answer is the peer's."""
    if address.startswith("ipc://"):
        name = address[len("ipc://") :]
        family, target = socket.AF_UNIX, "\0" + name[1:] if name.startswith("@") else name
    elif address.startswith("tcp://"):
        host, _, port = address[len("tcp://") :].rpartition(":")
        host = host.strip("[]")
        family, target = (socket.AF_INET6 if ":" in host else socket.AF_INET), (host, int(port))
    else:
        return False
    probe = socket.socket(family, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        await within(asyncio.get_running_loop().sock_connect(probe, target), timeout_s)
    except (ConnectionRefusedError, FileNotFoundError):
        return True
    except (OSError, TimeoutError, ValueError):
        return False
    finally:
        probe.close()
    return False
