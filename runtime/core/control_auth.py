"""Spawn tickets: the proof that a control call (``__prepare__``, ``__construct__``, which may import a module or
unpickle a class, and ``__shutdown__``) comes from the process that spawned the actor; other methods need none."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import select
import sys
import time
from dataclasses import dataclass
from typing import IO

from transport.security import CurveKeyError, ServerKeys

#: Methods a peer may call only with the spawner's proof.
CONTROL_METHODS = frozenset({"__prepare__", "__construct__", "__shutdown__"})
TOKEN_BYTES = 32
_MAX_LINE = 256  # {"token": 64 hex, "server_secret": 40 z85} and then some
#: How long a worker waits for its token on stdin before it gives up.
TOKEN_READ_DEADLINE_S = 30.0


class SpawnTokenError(RuntimeError):
    """A worker started without a valid spawn token on stdin."""


@dataclass(frozen=True)
class SpawnTicket:
    """What a spawner hands one worker process: the token for its control calls and the actor's own keys.

    Drawn fresh by whoever starts a worker and handed over on its stdin as one JSON line (never on its command line
    or environment, never over the network in clear)."""

    token: bytes
    server_keys: ServerKeys

    @classmethod
    def new(cls, server_keys: ServerKeys | None = None) -> SpawnTicket:
        """A fresh token; ``server_keys`` kept across restarts of one actor (its handles know the public key)."""
        return cls(os.urandom(TOKEN_BYTES), server_keys or ServerKeys.new())

    def line(self) -> str:
        """What the spawner writes to the worker's stdin."""
        return json.dumps({"token": self.token.hex(), "server_secret": self.server_keys.secret.decode()}) + "\n"

    def __repr__(self) -> str:  # never print the secrets
        return f"SpawnTicket(server_key={self.server_keys.public.decode()!r})"


def proof(token: bytes, call_id: bytes, method: str, fingerprint: bytes) -> bytes:
    """The header field that authorises one control call: ``HMAC-SHA256(token, call_id | method | fingerprint)``.

    The token never crosses the network, a proof is good for that one request only (a replay is a duplicate call
    id, answered from the call store and never run again), and no other peer can make one."""
    message = len(call_id).to_bytes(2, "little") + call_id + method.encode() + b"\0" + fingerprint
    return hmac.new(token, message, hashlib.sha256).digest()


def verify(token: bytes | None, given: object, call_id: bytes, method: str, fingerprint: bytes) -> bool:
    """Whether ``given`` is the proof for this call (always False in a process that has no token)."""
    if token is None or type(given) is not bytes or len(given) != hashlib.sha256().digest_size:
        return False
    return hmac.compare_digest(given, proof(token, call_id, method, fingerprint))


def read_ticket(stream: IO[bytes] | None = None, deadline_s: float = TOKEN_READ_DEADLINE_S) -> SpawnTicket:
    """Read the spawn ticket line from ``stream`` (stdin), waiting at most ``deadline_s``."""
    stream = stream if stream is not None else sys.stdin.buffer
    how = (
        "runtime.worker reads its spawn ticket (one JSON line: token, server_secret) from stdin; start "
        "workers with runtime.spawn or miles-launch, or write runtime.internals.SpawnTicket.new().line() to it and "
        "attach with that ticket"
    )
    fd = stream.fileno()
    deadline = time.monotonic() + deadline_s
    line = b""
    while not line.endswith(b"\n") and len(line) <= _MAX_LINE:  # byte by byte: leave the rest of stdin alone
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise SpawnTokenError(f"no spawn ticket on stdin within {deadline_s} s; {how}")
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line += chunk
    try:
        fields = json.loads(line)
        token = bytes.fromhex(fields["token"])
        keys = ServerKeys.from_secret(fields["server_secret"])
    except (ValueError, TypeError, KeyError, CurveKeyError):
        token = b""
    if len(token) != TOKEN_BYTES:
        raise SpawnTokenError(f"stdin did not start with a spawn ticket; {how}")
    return SpawnTicket(token, keys)
