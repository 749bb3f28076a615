"""The process-wide ZeroMQ context holds more than libzmq's default 1023 sockets (a long-lived driver that has
called about a thousand actors had every new socket fail with EMFILE: the fresh-clone CI run of 0e05a8b)."""

from __future__ import annotations

import resource

import pytest
import zmq

from transport.sockets import shared_context


def test_the_shared_context_opens_more_sockets_than_libzmqs_default() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 1500:
        pytest.fail(f"this test needs RLIMIT_NOFILE >= 1500 (soft limit {soft}): raise it with `ulimit -n`")
    context = shared_context()
    sockets = []
    try:
        for _ in range(1100):
            sockets.append(context.socket(zmq.DEALER))
    finally:
        for socket in sockets:
            socket.close(linger=0)
    assert len(sockets) == 1100
