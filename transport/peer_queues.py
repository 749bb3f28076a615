"""A ROUTER's queues for peers whose pipes are full: a peer that stops reading holds up no other."""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import Protocol

import zmq

from transport.codec import Buffer

log = logging.getLogger(__name__)

#: Messages a ROUTER keeps for one peer whose pipe is full (beyond the pipe's own high-water mark).
DEFAULT_MAX_QUEUED_PER_PEER = 1024


class DropCounter(Protocol):
    def drop(self, reason: str) -> None: ...


def _peer_key(frame: Buffer) -> bytes:
    return frame if type(frame) is bytes else bytes(frame)


class PeerQueues:
    """The messages waiting for peers whose pipes are full; every method runs with the endpoint's lock held.

    ZeroMQ queues a ROUTER's messages per peer (every message starts with the peer's routing id). A peer that stops
    reading fills its own pipe; its messages then wait here, at most ``max_queued`` (past it they are dropped and
    counted as ``peer_queue_full``), and are retried on a short timer while messages to every other peer go out at
    once. ``try_send(frames)`` sends one message without blocking and says whether the socket took it."""

    def __init__(self, max_queued: int, try_send: Callable[[list[Buffer]], bool], stats: DropCounter) -> None:
        self._max_queued = max_queued
        self._try_send = try_send
        self._stats = stats
        self._blocked: dict[bytes, collections.deque[list[Buffer]]] = {}  # by peer whose pipe is full

    def __bool__(self) -> bool:
        """Whether messages wait for some peer."""
        return bool(self._blocked)

    def put(self, frames: list[Buffer]) -> bool:
        """Send ``frames`` or queue it behind its peer's; True if the first peer just blocked (retries must start)."""
        blocked = self._blocked
        if blocked:
            waiting = blocked.get(_peer_key(frames[0]))
            if waiting is not None:  # behind its earlier messages: a peer's messages keep their order
                if len(waiting) < self._max_queued:
                    waiting.append(frames)
                else:  # it stopped reading: drop (a caller polls for what it missed), never hold up the others
                    self._stats.drop("peer_queue_full")
                return False
        if self._try_send(frames):
            return False
        blocked[_peer_key(frames[0])] = collections.deque([frames])
        return len(blocked) == 1

    def retry(self, name: str) -> bool:
        """Send what waits, peer by peer, until a pipe is full again; whether any message left a queue."""
        moved = False
        for peer, waiting in list(self._blocked.items()):
            while waiting:
                try:
                    if not self._try_send(waiting[0]):
                        break
                except zmq.ZMQError as exc:  # this message is lost; the peer's others, and the timer, go on
                    log.warning("%s: dropped a message to a peer: %s", name, exc)
                    self._stats.drop("send_failed")
                waiting.popleft()
                moved = True
            if not waiting:
                del self._blocked[peer]
        return moved

    def clear(self) -> None:
        self._blocked.clear()
