"""Liveness of the actor behind a connection (runtime.caller.link_liveness): heartbeats while calls are pending, a death
called after ``liveness_timeout_s`` of silence, and a dropped link proven dead only when nothing listens and the
probe got no answer. Pure: a fake connection, a fake socket that records frames, the "is anything listening" check
replaced by one the test answers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from runtime.caller import link_liveness
from runtime.caller.link_liveness import LinkLiveness
from transport import frames as wire
from transport.link_watch import LinkChange
from transport.protocol import Kind

ADDRESS = "tcp://127.0.0.1:5555"


class FakeConnection:
    """What LinkLiveness watches: silence and polls are set by the test; deaths are recorded."""

    def __init__(self, silent_s: list[float | None], due: list[bytes] | None = None) -> None:
        self.dead: str | None = None
        self.liveness_timeout_s = 10.0
        self.silences: Iterator[float | None] = iter(silent_s)
        self.due = due or []
        self.flushes = 0
        self.left_alone = False

    def silent_for(self, now: float) -> float | None:
        return next(self.silences, None)

    def due_for_poll(self, now: float) -> list[bytes]:
        due, self.due = self.due, []
        return due

    def flush_acks(self) -> None:
        self.flushes += 1

    def mark_dead(self, reason: str) -> None:
        assert self.dead is None, f"marked dead twice: {self.dead!r}, then {reason!r}"
        self.dead = reason

    def link_left_alone(self) -> bool:
        return self.left_alone


class FakeSocket:
    def __init__(self) -> None:
        self.address = ADDRESS
        self.closed = False
        self.sent: list[tuple[Kind, list[Any]]] = []

    def send(self, frames: list[bytes]) -> None:
        message = wire.unpack(frames, max_header_bytes=1024)
        self.sent.append((message.kind, message.meta))

    def close(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def fast_beats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(link_liveness, "PING_INTERVAL_S", 0.001)


def _beat(connection: FakeConnection, socket: FakeSocket, stop_after: int = 50) -> None:
    async def main() -> None:
        task = asyncio.ensure_future(LinkLiveness(ADDRESS, connection).heartbeat(socket))  # type: ignore[arg-type]
        for _ in range(stop_after):
            if task.done():
                break
            await asyncio.sleep(0.002)
        task.cancel()

    asyncio.run(main())


def test_no_ping_while_no_call_is_pending_but_acks_still_go_out() -> None:
    connection, socket = FakeConnection([None, None, None]), FakeSocket()
    _beat(connection, socket, stop_after=5)
    assert socket.sent == [] and connection.flushes >= 3 and connection.dead is None


def test_pending_calls_get_pings_with_new_nonces_and_silent_calls_a_poll() -> None:
    connection, socket = FakeConnection([0.5, 1.5, None], due=[b"call-1", b"call-2"]), FakeSocket()
    _beat(connection, socket, stop_after=5)
    assert socket.sent[:3] == [(Kind.PING, [1]), (Kind.POLL, [[b"call-1", b"call-2"]]), (Kind.PING, [2])]
    assert connection.dead is None


def test_an_actor_silent_past_the_timeout_is_taken_for_dead_and_the_beat_stops() -> None:
    connection, socket = FakeConnection([9.0, 10.5, 0.1, 0.1]), FakeSocket()
    _beat(connection, socket)
    assert connection.dead == f"no answer from {ADDRESS} for 10.5s (liveness_timeout_s=10.0)"
    assert socket.sent == [(Kind.PING, [1])]  # nothing after the death


class Listening:
    """Stands in for transport.link_watch.nothing_listens: the test says when and what it answers."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.answer: asyncio.Future[bool] | None = None

    async def __call__(self, address: str) -> bool:
        self.asked.append(address)
        self.answer = asyncio.get_running_loop().create_future()
        return await self.answer


def _drop(changes: list[LinkChange], *, refused: bool, pong: str | None = None, left_alone: bool = False,
          back_before_answer: bool = False) -> tuple[FakeConnection, FakeSocket, Listening]:  # fmt: skip
    connection, socket, listening = FakeConnection([]), FakeSocket(), Listening()
    connection.left_alone = left_alone

    async def main() -> None:
        liveness = LinkLiveness(ADDRESS, connection)  # type: ignore[arg-type]
        for change in changes:
            liveness.changed(socket, change, "3 reconnects refused")  # type: ignore[arg-type]
            if pong is not None and change is LinkChange.LOST:
                liveness.pong(pong)  # a PONG arriving after this drop
        await asyncio.sleep(0)
        if listening.answer is not None:
            if back_before_answer:
                liveness.changed(socket, LinkChange.BACK, "")  # type: ignore[arg-type]
            listening.answer.set_result(refused)
            await asyncio.sleep(0)
        liveness.close()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(link_liveness, "nothing_listens", listening)
        asyncio.run(main())
    return connection, socket, listening


def test_a_drop_sends_a_probe_ping_and_a_refused_connect_proves_the_process_gone() -> None:
    connection, socket, listening = _drop([LinkChange.LOST, LinkChange.GONE], refused=True)
    assert socket.sent == [(Kind.PING, ["probe-1"])] and listening.asked == [ADDRESS]
    assert connection.dead == f"the actor's process is gone ({ADDRESS}): 3 reconnects refused"
    assert socket.closed  # no more reconnects to an address nobody listens at


def test_a_connect_that_is_not_refused_proves_nothing() -> None:
    connection, socket, _ = _drop([LinkChange.LOST, LinkChange.GONE], refused=False)
    assert connection.dead is None and not socket.closed


def test_an_answered_probe_keeps_the_actor_alive() -> None:
    connection, _, listening = _drop([LinkChange.LOST, LinkChange.GONE], refused=True, pong="probe-1")
    assert listening.asked == [] and connection.dead is None


def test_a_link_left_to_a_process_watcher_or_a_restart_is_not_judged_here() -> None:
    connection, _, listening = _drop([LinkChange.LOST, LinkChange.GONE], refused=True, left_alone=True)
    assert listening.asked == [] and connection.dead is None


def test_a_link_back_while_the_connect_is_tried_is_not_taken_for_dead() -> None:
    connection, socket, _ = _drop([LinkChange.LOST, LinkChange.GONE], refused=True, back_before_answer=True)
    assert connection.dead is None and not socket.closed


def test_only_the_answer_to_the_latest_probe_counts() -> None:
    connection, socket, listening = _drop(
        [LinkChange.LOST, LinkChange.LOST, LinkChange.GONE], refused=True, pong="probe-1"
    )  # the first drop's probe answered only after the second drop
    assert socket.sent == [(Kind.PING, ["probe-1"]), (Kind.PING, ["probe-2"])]
    assert listening.asked == [ADDRESS] and connection.dead is not None
