"""Malformed requests to a fork server (runtime/processes/fork_server.py) are refused; it forks nothing and goes on.

The fork server's only peer is its client (a host agent, or a process that spawns actors), over a socketpair the
client made, but a bug there (or in whatever wraps the client) must not be able to kill it or make it fork: every
bad request gets an ``{"error"}`` reply, and the next request is served as usual.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from runtime.processes import fork_server as zygote

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]
_SO_SNDBUFFORCE = 32  # Linux; as root, past wmem_max


@pytest.fixture
def fork_server() -> Iterator[tuple[socket.socket, subprocess.Popen[bytes]]]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runtime.processes.fork_server",
            "--socket-fd",
            str(theirs.fileno()),
            "--death-signal",
            "--reaper-pid",
            str(os.getpid()),
        ],
        pass_fds=[theirs.fileno()],
        cwd=REPO,
    )
    theirs.close()
    ours.settimeout(60)
    ours.setsockopt(socket.SOL_SOCKET, _SO_SNDBUFFORCE, 4 * zygote.REQUEST_MAX_BYTES)  # room for oversized ones
    try:
        assert json.loads(ours.recv(1 << 16)).get("ready"), "the fork server did not start"
        yield ours, proc
    finally:
        ours.close()  # the fork server leaves when its agent's socket closes
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _ask(sock: socket.socket, data: bytes, nfds: int = zygote.STDIO_FDS) -> dict[str, object]:
    fds = [os.open(os.devnull, os.O_RDWR) for _ in range(nfds)]
    try:
        socket.send_fds(sock, [data], fds)
    finally:
        for fd in fds:
            os.close(fd)
    return json.loads(sock.recv(1 << 16))


def _request(**fields: object) -> bytes:
    request = {"argv": [sys.executable, "-m", zygote.WORKER_MODULE], "env": dict(os.environ), "cwd": str(REPO)}
    return json.dumps({**request, **fields}).encode()


@pytest.mark.parametrize(
    ("what", "data", "nfds", "says"),
    [
        ("no descriptors", _request(), 0, "fds"),
        ("one descriptor too many", _request(), zygote.STDIO_FDS + 1, "fds"),
        ("over the size limit", b" " * (zygote.REQUEST_MAX_BYTES + 1), zygote.STDIO_FDS, "bytes"),
        ("not JSON", b"\xff\xfe not json", zygote.STDIO_FDS, "bad request"),
        ("a JSON list", b"[1, 2, 3]", zygote.STDIO_FDS, "bad request"),
        ("a missing field", json.dumps({"argv": ["x"], "env": {}}).encode(), zygote.STDIO_FDS, "bad request"),
        ("env not a mapping", _request(env=["A=1"]), zygote.STDIO_FDS, "bad request"),
        ("nested 100000 deep", b"[" * 100_000 + b"]" * 100_000, zygote.STDIO_FDS, "bad request"),
    ],
)
def test_a_malformed_request_is_refused_and_the_fork_server_goes_on(
    fork_server: tuple[socket.socket, subprocess.Popen[bytes]], what: str, data: bytes, nfds: int, says: str
) -> None:
    sock, proc = fork_server
    reply = _ask(sock, data, nfds)
    assert says in str(reply.get("error", "")), f"{what}: {reply}"
    assert proc.poll() is None, f"{what}: the fork server died"
    assert not psutil.Process(proc.pid).children(), f"{what}: it forked anyway"
    # Still serving: a well-formed request it must refuse (another hash seed than the one it imported with).
    reply = _ask(sock, _request(env={**os.environ, "PYTHONHASHSEED": "12345"}))
    assert "PYTHONHASHSEED" in str(reply.get("error", "")), reply
    assert proc.poll() is None and not psutil.Process(proc.pid).children()
