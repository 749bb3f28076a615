"""A peer opening connection after connection: the actor refuses those past its maximum and serves the rest.

Once, 2000 connections took every descriptor of a 1024 open-file limit and locked new clients out. Now a worker
raises its soft limit to the hard one at start, and its socket's ZAP gate (transport.zap_gate) refuses
connections past ``MILES_MAX_CONNECTIONS`` before any of their messages are read.
"""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest
import zmq
from raw_client import RawClient

from runtime import ActorDied, ActorHandle, connect, spawn

pytestmark = pytest.mark.processes

FLOOD = 400
LIMIT = 40


def _soft_and_hard_fd_limits(pid: int) -> tuple[str, str]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return soft, hard
    raise AssertionError("no open-file limit in /proc")


def _connections(actor: ActorHandle) -> dict[str, int]:
    return actor.method("__stats__")().result(10)["connections"]


def _fill_up(actor: ActorHandle, context: zmq.Context, flood: list[zmq.Socket]) -> None:
    """Open connections one at a time until the actor holds LIMIT. A burst can leave fewer: the gate counts every
    open connection, those still in their handshake too, so under a burst it refuses more than the excess."""
    deadline = time.monotonic() + 20
    while (before := _connections(actor))["open"] < LIMIT:
        socket = context.socket(zmq.DEALER)
        socket.linger = 0
        socket.connect(actor.endpoint)
        flood.append(socket)
        while _connections(actor) == before:
            assert time.monotonic() < deadline, f"a new connection was neither admitted nor refused: {before}"
            time.sleep(0.02)


def test_a_connection_flood_is_refused_past_the_limit_and_everyone_else_is_served(no_leaks: None) -> None:
    actor = spawn("attack_actors:Target", name="flooded", env={"MILES_MAX_CONNECTIONS": str(LIMIT)})
    context = zmq.Context()
    flood: list[zmq.Socket] = []
    try:
        soft, hard = _soft_and_hard_fd_limits(actor.pid)
        assert soft == hard  # raised at start
        assert actor.hit(1).result(10) == 1  # a client connected before the flood
        fds_before = psutil.Process(actor.pid).num_fds()
        for index in range(FLOOD):
            socket = context.socket(zmq.DEALER)
            socket.linger = 0
            socket.connect(actor.endpoint)
            flood.append(socket)
            if index % 50 == 0:
                time.sleep(0.05)
        deadline = time.monotonic() + 20
        while True:  # refused connections are closed at once: the actor's descriptors stay within the limit
            counts = _connections(actor)
            extra_fds = psutil.Process(actor.pid).num_fds() - fds_before
            if counts["refused"] >= FLOOD - LIMIT and extra_fds < LIMIT + 20:
                break
            assert time.monotonic() < deadline, f"the flood was not refused: {counts}, {extra_fds} more fds"
            time.sleep(0.2)
        for key in range(2, 12):  # the client from before the flood is served throughout
            assert actor.hit(key).result(10) == key
        _fill_up(actor, context, flood)
        with pytest.raises(ActorDied, match="as many open as it allows"):  # a new one is told why, at once
            connect(actor.endpoint, deadline_s=10)
        for socket in flood:
            socket.close(linger=0)
        flood.clear()
        deadline = time.monotonic() + 20
        while _connections(actor)["open"] > 5:
            assert time.monotonic() < deadline, "closed connections were not counted as closed"
            time.sleep(0.2)
        late = RawClient(actor.endpoint)  # once the flood is gone, new clients get in again
        try:
            assert late.call("hit", 99) == 99
        finally:
            late.close()
    finally:
        for socket in flood:
            socket.close(linger=0)
        context.term()
        actor.kill()
