"""Same-host direct links between a real ROUTER and DEALER (transport.sockets), and raw peers that misbehave.

What a link must do: carry a caller's messages (and their replies) off ZeroMQ, keep them in order when it
breaks or was never there, survive the actor restarting at the same address, and turn away what a hostile local
process sends (a wrong hello, a head past the limits, another user's connect) without disturbing anyone else.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

from transport import local_twin
from transport.direct_links import HELLO
from transport.endpoints import ZmqEndpoint
from transport.reader_handoff import DRAIN_BATCH
from transport.sockets import dealer, router, shared_context
from transport.stream_frames import StreamReader, head

OTHER_UID = 65534  # nobody
MAX_BYTES = 4 << 20


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


class Echo:
    """A ROUTER that answers every message with its frames, on a loop thread; records what it was handed."""

    def __init__(self, loop: asyncio.AbstractEventLoop, address: str = "tcp://127.0.0.1:0") -> None:
        self.loop = loop
        self.handed: list[list[Any]] = []  # the frames as received: bytes off a link, zmq.Frame off ZeroMQ
        self.endpoint: ZmqEndpoint
        self.address = ""

        def open_it() -> None:
            self.endpoint, self.address = router(
                shared_context(), address, self._echo, max_message_bytes=MAX_BYTES
            )
            self.endpoint.start()

        on_loop(loop, open_it)

    def _echo(self, frames: list[Any]) -> None:
        self.handed.append(frames)
        self.endpoint.send([bytes(frame) for frame in frames])

    def payloads(self) -> list[bytes]:
        return [bytes(frames[1]) for frames in self.handed]

    def over_links(self) -> int:
        return sum(1 for frames in self.handed if not isinstance(frames[1], zmq.Frame))

    def close(self) -> None:
        on_loop(self.loop, self.endpoint.close)


def rebind(loop: asyncio.AbstractEventLoop, address: str, timeout_s: float = 10.0) -> Echo:
    """A new Echo at ``address`` with its direct listener.

    ZeroMQ closes a socket on its I/O thread, so the port or the same-host twin may be held a moment longer (a
    restarted actor is a new process and finds them free)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            server = Echo(loop, address)
            if server.endpoint._direct is not None:
                return server
            server.close()  # the twin was still held: no listener this time
        except OSError as exc:  # transport.sockets.router: "cannot bind ...: Address already in use"
            if "in use" not in str(exc):
                raise
        assert time.monotonic() < deadline, f"{address} or its twin still bound after {timeout_s} s"
        time.sleep(0.02)


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> Any:
    async def call() -> Any:
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), loop).result(10)


@pytest.fixture
def loop(monkeypatch: pytest.MonkeyPatch) -> Iterator[asyncio.AbstractEventLoop]:
    monkeypatch.setenv(local_twin.ENV, "1")
    monkeypatch.setenv(local_twin.DIRECT_ENV, "1")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-loop", daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


@pytest.fixture
def echo(loop: asyncio.AbstractEventLoop) -> Iterator[Echo]:
    server = Echo(loop)
    try:
        yield server
    finally:
        server.close()


class Caller:
    """A DEALER on the loop, collecting its replies."""

    def __init__(self, loop: asyncio.AbstractEventLoop, address: str) -> None:
        self.loop = loop
        self.replies: list[bytes] = []

        def open_it() -> ZmqEndpoint:
            endpoint = dealer(shared_context(), address, self._reply, routing_id=os.urandom(8))
            endpoint.start()
            return endpoint

        self.endpoint: ZmqEndpoint = on_loop(loop, open_it)

    def _reply(self, frames: list[Any]) -> None:
        self.replies.append(bytes(frames[0]))

    @property
    def linked(self) -> bool:
        return self.endpoint._direct is not None and self.endpoint._direct.connected

    def send_all(self, payloads: list[bytes]) -> None:
        """Send ``payloads`` and wait for as many replies."""
        expected = len(self.replies) + len(payloads)
        for payload in payloads:
            self.endpoint.send([payload])
        wait_for(lambda: len(self.replies) >= expected)

    def close(self) -> None:
        on_loop(self.loop, self.endpoint.close)


@pytest.fixture
def caller(loop: asyncio.AbstractEventLoop, echo: Echo) -> Iterator[Caller]:
    client = Caller(loop, echo.address)
    try:
        yield client
    finally:
        client.close()


def raw_link(echo: Echo) -> socket.socket:
    """A plain connection to the echo's direct-link listener, as any local process could open."""
    name = local_twin.direct_name(local_twin.name_for(echo.address))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect("\0" + name)
    return sock


def encode(frames: list[bytes]) -> bytes:
    return head([memoryview(frame) for frame in frames]) + b"".join(frames)


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True


def test_a_same_host_caller_and_its_replies_go_over_the_link(echo: Echo, caller: Caller) -> None:
    assert caller.linked
    payloads = [b"%d" % i for i in range(200)] + [b"L" * (2 << 20)]
    caller.send_all(payloads)
    assert caller.replies == payloads  # in order, the 2 MiB one included
    assert echo.over_links() == len(payloads), "some messages reached the actor over ZeroMQ"
    assert not echo.endpoint.stats.dropped and not caller.endpoint.stats.dropped


def test_with_direct_links_off_on_one_side_the_other_uses_zeromq(
    loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(local_twin.DIRECT_ENV, "0")
    server = Echo(loop)  # a twin, but no direct listener
    monkeypatch.setenv(local_twin.DIRECT_ENV, "1")
    client = Caller(loop, server.address)
    try:
        assert not client.linked
        client.send_all([b"%d" % i for i in range(300)])
        assert client.replies == [b"%d" % i for i in range(300)]
        assert server.over_links() == 0
    finally:
        client.close()
        server.close()


def test_the_actor_restarting_at_the_same_address_gets_a_new_link(
    loop: asyncio.AbstractEventLoop, echo: Echo, caller: Caller
) -> None:
    caller.send_all([b"before"])
    address = echo.address
    echo.close()
    wait_for(lambda: not caller.linked)  # the caller sees its link end
    again = rebind(loop, address)
    try:
        caller.send_all([b"after"])
        assert caller.replies == [b"before", b"after"]
        assert again.payloads() == [b"after"] and again.over_links() == 1
        assert caller.linked
    finally:
        again.close()


def test_without_a_listener_any_more_the_caller_goes_on_over_zeromq_in_order(echo: Echo, caller: Caller) -> None:
    first = [b"a%d" % i for i in range(100)]
    caller.send_all(first)
    links = echo.endpoint._direct

    def listener_gone() -> None:  # ZeroMQ stays up; the links and their listener go (as if it ran out of fds)
        echo.loop.remove_reader(links._listener_fd)
        links._listener.close()
        for stream in list(links._by_fd.values()):
            links._drop(stream, "test")

    on_loop(echo.loop, listener_gone)
    second = [b"b%d" % i for i in range(500)]
    caller.send_all(second)
    assert caller.replies == first + second  # nothing lost, nothing overtaken
    assert echo.payloads() == first + second
    assert echo.over_links() == len(first) and not caller.linked
    assert not echo.endpoint.stats.dropped and not caller.endpoint.stats.dropped


def test_a_hello_and_a_large_first_message_in_one_write_are_both_taken(echo: Echo) -> None:
    routing_id = os.urandom(8)
    big = os.urandom(1 << 20)
    with raw_link(echo) as sock:
        sock.sendall(encode([HELLO, routing_id]) + encode([big]))
        wait_for(lambda: len(echo.handed) == 1)
        assert [bytes(frame) for frame in echo.handed[0]] == [routing_id, big]
        reply = StreamReader(max_frames=4, max_message_bytes=MAX_BYTES)  # the answer comes back over the link
        sock.setblocking(False)
        got: list = []
        wait_for(lambda: bool(got.extend(reply.read(sock, 1)[0]) or got))
        assert [bytes(frame) for frame in got[0]] == [big]


@pytest.mark.parametrize(
    "wire",
    [
        encode([b"GET / HTTP/1.1\r\n"]),  # not a hello
        encode([HELLO, b""]),  # no routing id
        encode([HELLO, b"r" * 256]),  # longer than ZeroMQ allows
        encode([b"miles-direct/0", b"id"]),  # another version
        (1).to_bytes(4, "little") + (1 << 40).to_bytes(8, "little"),  # a terabyte before the hello
        (100000).to_bytes(4, "little"),  # more frames than any message has
    ],
    ids=["not-a-hello", "empty-id", "long-id", "other-version", "huge-first", "many-frames"],
)
def test_a_hostile_first_message_closes_that_link_alone(echo: Echo, caller: Caller, wire: bytes) -> None:
    with raw_link(echo) as sock:
        sock.sendall(wire)
        assert closed_by_peer(sock)
    assert echo.endpoint.stats.dropped.get("malformed") == 1
    assert echo.handed == []  # nothing of it reached the actor
    caller.send_all([b"still served"])
    assert caller.linked and echo.over_links() == 1


@pytest.mark.processes
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_another_users_connect_is_refused(echo: Echo, caller: Caller) -> None:
    name = "\0" + local_twin.direct_name(local_twin.name_for(echo.address))
    pid = os.fork()
    if pid == 0:  # the child only makes system calls; its exit code says what happened
        code = 3
        try:
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(5)
            sock.connect(name)  # the abstract namespace has no permissions: the listener must check
            try:
                sock.sendall(encode([HELLO, b"intruder"]) + encode([b"payload"]))
            except (BrokenPipeError, ConnectionResetError):
                code = 0  # closed before it could even send
            else:
                code = 0 if closed_by_peer(sock) else 1
        except TimeoutError:
            code = 2  # left open: not refused
        except BaseException:
            code = 3
        os._exit(code)
    deadline = time.monotonic() + 15
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the other user's process hung")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0, "the other user's link was not closed"
    assert echo.endpoint.stats.dropped.get("direct_refused") == 1
    assert echo.handed == []
    caller.send_all([b"still served"])
    assert caller.linked


def test_a_flood_over_zeromq_does_not_hold_back_a_link(loop: asyncio.AbstractEventLoop, echo: Echo) -> None:
    """The reader gives the socket and the links each their share of a batch: a message on a link is handed up
    within the first batch however many wait on the socket (the flood that stalled a linked caller's calls in
    tests/faults/test_never_hang.py)."""
    flood = shared_context().socket(zmq.DEALER)  # plain ZeroMQ: no link
    flood.setsockopt(zmq.LINGER, 0)
    flood.connect(echo.address)
    released = threading.Event()
    with raw_link(echo) as sock:
        try:
            flood.send(b"hi")
            sock.sendall(encode([HELLO, b"linked"]) + encode([b"hi"]))
            wait_for(lambda: len(echo.handed) == 2)
            loop.call_soon_threadsafe(lambda: released.wait(10))  # the reader is held while both fill up
            for n in range(8 * DRAIN_BATCH):
                flood.send(b"z%d" % n)
            time.sleep(0.3)  # ZeroMQ's I/O thread moves them into the ROUTER's pipe
            sock.sendall(encode([b"link"]))
            released.set()
            wait_for(lambda: b"link" in echo.payloads()[2:])
            position = echo.payloads()[2:].index(b"link")
            assert position <= DRAIN_BATCH, f"the link's message came after {position} socket messages"
            wait_for(lambda: len(echo.handed) == 3 + 8 * DRAIN_BATCH)
        finally:
            released.set()
            flood.close(linger=0)
