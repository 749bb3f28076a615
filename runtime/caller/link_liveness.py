"""Whether the actor behind a connection is alive: heartbeats while calls are pending, and the link's changes.

A death is seen at once by every holder, not only the spawner; a busy actor is never taken for dead.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from transport.endpoints import ZmqEndpoint
from transport.link_watch import LinkChange, nothing_listens
from transport.messages import Ping, Poll

PING_INTERVAL_S = 0.5
POLL_AFTER_S = 1.0


class Watched(Protocol):
    """What liveness uses of the connection it watches (:class:`runtime.caller.connection.Connection`)."""

    dead: str | None  # why the actor is gone, or None
    liveness_timeout_s: float

    def silent_for(self, now: float) -> float | None:
        """How long the actor has said nothing while calls are pending; None while none are."""

    def due_for_poll(self, now: float) -> list[bytes]:
        """The ids of the calls silent for ``POLL_AFTER_S``, marked as polled at ``now``."""

    def flush_acks(self) -> None:
        """Send the acknowledgements no SUBMIT has carried yet."""

    def mark_dead(self, reason: str) -> None:
        """The actor is gone: fail every call with ActorDied."""

    def link_left_alone(self) -> bool:
        """Whether link loss is not ours to judge: the connection is dead already, a process watcher of ours
        reports the exit, or a restart is under way."""


class LinkLiveness:
    """The liveness of the actor at ``address`` (its endpoint, as the connection names it); runs on the loop."""

    def __init__(self, address: str, watched: Watched) -> None:
        self._address = address
        self._watched = watched
        self._probes = 0
        self._probe: str | None = None  # the nonce of the PING sent when the link last dropped
        self._probe_answered = False
        self._link_down = False
        self._confirming: asyncio.Task[None] | None = None  # is the listener really gone? (see _confirm_gone)

    async def heartbeat(self, socket: ZmqEndpoint) -> None:
        """Beat until the actor is dead (or the task is cancelled); acknowledgements left over go out too.

        Every ``PING_INTERVAL_S`` while calls are pending, a PING goes out and calls silent for ``POLL_AFTER_S``
        are POLLed; an actor that has said nothing for ``liveness_timeout_s`` is taken for dead (unreachable). A
        busy actor keeps its link and its control lane answers PINGs, so it is never taken for dead.
        """
        watched, nonce = self._watched, 0
        while watched.dead is None:
            await asyncio.sleep(PING_INTERVAL_S)
            watched.flush_acks()
            now = time.monotonic()
            silent_s = watched.silent_for(now)
            if silent_s is None:
                continue
            if silent_s > watched.liveness_timeout_s:
                watched.mark_dead(
                    f"no answer from {self._address} for {silent_s:.1f}s "
                    f"(liveness_timeout_s={watched.liveness_timeout_s})"
                )
                return
            nonce += 1
            socket.send(Ping(nonce).pack())
            quiet = watched.due_for_poll(now)
            if quiet:
                socket.send(Poll(quiet).pack())

    def changed(self, socket: ZmqEndpoint, change: LinkChange, reason: str) -> None:
        """The socket monitor's word (read on the loop, off the call path): a drop sends a probe; a peer whose
        listener is gone is confirmed gone (:meth:`_confirm_gone`): reconnects refused, a connect of our own refused
        and no answer to the probe (transport.link_watch). Where a process watcher of ours reports the exit with
        its code (the spawner, its supervisor) or a restart is under way, the link is left to it."""
        self._link_down = change is not LinkChange.BACK
        if change is LinkChange.LOST:
            self._probes += 1
            self._probe, self._probe_answered = f"probe-{self._probes}", False
            socket.send(Ping(self._probe).pack())  # answered as soon as a reconnect lands
        elif change is LinkChange.GONE and not self._leave_alone() and self._confirming is None:
            self._confirming = asyncio.get_running_loop().create_task(self._confirm_gone(socket, reason))

    def pong(self, nonce: object) -> None:
        """A PONG came with ``nonce``: the answer to the probe means the actor is alive after the drop."""
        if nonce == self._probe:
            self._probe_answered = True

    def close(self) -> None:
        if self._confirming is not None:
            self._confirming.cancel()

    def _leave_alone(self) -> bool:
        return self._watched.link_left_alone() or self._probe_answered

    async def _confirm_gone(self, socket: ZmqEndpoint, reason: str) -> None:
        """Failed reconnects do not say why; a connect of our own does: refused means nothing listens there."""
        try:
            refused = await nothing_listens(socket.address)
        finally:
            self._confirming = None
        if not refused or socket.closed or not self._link_down or self._leave_alone():
            return  # not proven: a link that stays silent is still caught by the liveness timeout
        self._watched.mark_dead(f"the actor's process is gone ({self._address}): {reason}")
        socket.close()  # no more reconnects to an address nobody listens at
