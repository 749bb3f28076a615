"""An endpoint's socket monitor: the events that say a link is broken, read on the loop, never on the call path.

So a caller fails at once on what reconnecting cannot heal, instead of waiting for a liveness timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import zmq
from zmq.utils.monitor import recv_monitor_message

from transport import security
from transport.link_watch import LinkChange, LinkWatch

log = logging.getLogger(__name__)


class EndpointMonitor:
    """The monitor socket of ``socket`` (opened here, before the socket connects: the first handshake may fail at
    once). ``on_handshake_failure(reason)`` and ``on_link(change, reason)`` run on the loop.

    A DEALER reports handshake failures that reconnecting cannot heal (a refused key, CURVE on one side only:
    :class:`~transport.security.HandshakeFailures`) and link changes (a drop, a reconnect, a peer whose listener is
    gone: :mod:`transport.link_watch`)."""

    def __init__(
        self,
        socket: zmq.Socket,
        *,
        name: str,
        curve: bool,
        on_handshake_failure: Callable[[str], None] | None,
        on_link: Callable[[LinkChange, str], None] | None,
        link_watch: LinkWatch | None,
    ) -> None:
        self._socket = socket
        self._name = name
        self._on_handshake_failure = on_handshake_failure
        self._handshakes = security.HandshakeFailures(curve=curve)
        self._on_link = on_link
        self._link = (link_watch or LinkWatch()) if on_link is not None else None
        events = security.HandshakeFailures.EVENTS if on_handshake_failure is not None else 0
        events |= LinkWatch.EVENTS if on_link is not None else 0
        self._monitor: zmq.Socket | None = socket.get_monitor_socket(events) if events else None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._monitor is not None:
            loop.add_reader(self._monitor.FD, self.drain)
            loop.call_soon(self.drain)

    def drain(self) -> None:
        """Handle every event waiting on the monitor socket (until it is closed)."""
        while self._monitor is not None and self._monitor.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            kind, value = event["event"], event["value"]
            reason = self._handshakes.observe(kind, value)
            if reason is not None and self._on_handshake_failure is not None:
                try:
                    self._on_handshake_failure(reason)
                except Exception:
                    log.exception("%s: handshake failure handler failed", self._name)
            change = self._link.observe(kind, value) if self._link is not None else None
            if change is not None and self._on_link is not None:
                try:
                    self._on_link(*change)
                except Exception:
                    log.exception("%s: link change handler failed", self._name)

    def close(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Stop monitoring (before the socket itself closes); ``loop``: the one reading it, if any is still open."""
        if self._monitor is None:
            return
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._monitor.FD)
        self._socket.disable_monitor()
        self._monitor.close(linger=0)
        self._monitor = None
