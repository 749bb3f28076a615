"""Spawn tokens: the proof that a control call (construct, shutdown) comes from the process that spawned the actor.

Whoever starts a worker process draws a fresh random token and hands it over on the worker's stdin (never on its
command line or environment, never over the network). A control call then carries
``HMAC-SHA256(token, call_id | method | request fingerprint)`` in its SUBMIT header: the token itself never
crosses the network, a proof is good for that one request only (a replay is a duplicate call id, answered from
the call store and never run again), and no other peer can make one.

Control methods: ``__prepare__`` and ``__construct__`` (which may import a module or unpickle a class) and
``__shutdown__``. Every other method, built-in or the actor's own, needs no proof.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import select
import sys
import time
from typing import IO

#: Methods a peer may call only with the spawner's proof.
CONTROL_METHODS = frozenset({"__prepare__", "__construct__", "__shutdown__"})
TOKEN_BYTES = 32
_TOKEN_HEX = 2 * TOKEN_BYTES
#: How long a worker waits for its token on stdin before it gives up.
TOKEN_READ_DEADLINE_S = 30.0


class SpawnTokenError(RuntimeError):
    """A worker started without a valid spawn token on stdin."""


def new_token() -> bytes:
    return os.urandom(TOKEN_BYTES)


def token_line(token: bytes) -> bytes:
    """What the spawner writes to the worker's stdin."""
    return token.hex().encode() + b"\n"


def proof(token: bytes, call_id: bytes, method: str, fingerprint: bytes) -> bytes:
    """The header field that authorises one control call."""
    message = len(call_id).to_bytes(2, "little") + call_id + method.encode() + b"\0" + fingerprint
    return hmac.new(token, message, hashlib.sha256).digest()


def verify(token: bytes | None, given: object, call_id: bytes, method: str, fingerprint: bytes) -> bool:
    """Whether ``given`` is the proof for this call (always False in a process that has no token)."""
    if token is None or type(given) is not bytes or len(given) != hashlib.sha256().digest_size:
        return False
    return hmac.compare_digest(given, proof(token, call_id, method, fingerprint))


def read_token(stream: IO[bytes] | None = None, deadline_s: float = TOKEN_READ_DEADLINE_S) -> bytes:
    """Read the spawn token line from ``stream`` (stdin), waiting at most ``deadline_s``."""
    stream = stream if stream is not None else sys.stdin.buffer
    how = (
        "runtime.worker reads its spawn token (64 hex digits and a newline) from stdin; start workers with "
        "runtime.spawn, miles-launch, or pipe the token you will attach with (runtime.attach(..., spawn_token=))"
    )
    fd = stream.fileno()
    deadline = time.monotonic() + deadline_s
    line = b""
    while not line.endswith(b"\n") and len(line) <= _TOKEN_HEX:  # byte by byte: leave the rest of stdin alone
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise SpawnTokenError(f"no spawn token on stdin within {deadline_s} s; {how}")
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line += chunk
    text = line.strip()
    try:
        token = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        token = b""
    if len(token) != TOKEN_BYTES:
        raise SpawnTokenError(f"stdin did not start with a spawn token; {how}")
    return token
