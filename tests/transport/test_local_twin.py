"""Same-host twin sockets: found only where TCP would reach the same listener, gone with their owner."""

from __future__ import annotations

import time

import pytest
import zmq

from transport import local_twin
from transport.sockets import shared_context


def _bound_router(context: zmq.Context, twin: bool) -> tuple[zmq.Socket, str]:
    socket = context.socket(zmq.ROUTER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.bind("tcp://127.0.0.1:0")
    address = socket.getsockopt_string(zmq.LAST_ENDPOINT)
    if twin:
        socket.bind(local_twin.name_for(address))
    return socket, address


def test_a_twin_is_named_after_the_tcp_address_and_found_while_its_owner_listens() -> None:
    context = shared_context()
    socket, address = _bound_router(context, twin=True)
    port = address.rsplit(":", 1)[1]
    assert local_twin.name_for(address) == f"ipc://@miles-tcp-127.0.0.1:{port}"
    assert local_twin.name_for(f"tcp://0.0.0.0:{port}") == f"ipc://@miles-tcp-*:{port}"
    assert local_twin.find(address) == f"ipc://@miles-tcp-127.0.0.1:{port}"
    socket.close(linger=0)
    # The abstract socket goes with its listener (closed by ZeroMQ's I/O thread): nothing is left behind.
    deadline = time.monotonic() + 5
    while local_twin.find(address) is not None:
        assert time.monotonic() < deadline, "the twin outlived its socket"
        time.sleep(0.01)


def test_a_tcp_listener_without_a_twin_is_reached_over_tcp() -> None:
    socket, address = _bound_router(shared_context(), twin=False)
    try:
        assert local_twin.find(address) is None
    finally:
        socket.close(linger=0)


def test_addresses_that_are_not_plain_tcp_or_are_names_get_no_twin() -> None:
    assert local_twin.find("ipc:///tmp/some.sock") is None
    assert local_twin.name_for("inproc://x") is None
    socket, address = _bound_router(shared_context(), twin=True)
    try:
        port = address.rsplit(":", 1)[1]
        # Names are never resolved on the call path; the caller given a name keeps TCP.
        assert local_twin.find(f"tcp://localhost:{port}") is None
    finally:
        socket.close(linger=0)


def test_the_switch_turns_twins_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(local_twin.ENV, "0")
    assert not local_twin.enabled()
    monkeypatch.setenv(local_twin.ENV, "1")
    assert local_twin.enabled()
