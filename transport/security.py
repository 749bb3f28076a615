"""CURVE security for the actor transport: keys by role, socket options, and the ZAP authenticator.

Keys by role, so that no process holds a secret it does not need: every actor has a keypair of its own
(:class:`ServerKeys`); a cluster's clients share one (:class:`CurveConfig`), which never allows control calls.
"""

from __future__ import annotations

import functools
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import zmq
import zmq.auth

from transport import zap_gate

log = logging.getLogger(__name__)

#: The environment variable naming the directory that holds this cluster's keys.
CURVE_DIR_ENV: Final = "MILES_CURVE_DIR"
CLIENT_KEY = "client.key"
#: Extra authorised client public keys (``*.key`` certificate files), e.g. for an operator's own tools.
AUTHORIZED_DIR = "authorized_clients"
_SECRET_SUFFIX = "_secret"


class CurveKeyError(ValueError):
    """Missing, malformed or too openly readable key files."""


class _FromEnv:
    """Sentinel: take the keys from ``MILES_CURVE_DIR`` (if set)."""

    def __repr__(self) -> str:
        return "FROM_ENV"


#: Default of every ``curve_dir`` option: use ``MILES_CURVE_DIR`` when it is set, else no CURVE.
#: Opting out (no ``MILES_CURVE_DIR``, or ``curve_dir=None``) is for trusted networks only. Its price is speed: CURVE
#: encrypts and authenticates every byte on TCP (libsodium's XSalsa20-Poly1305), so large transfers between hosts
#: are several times slower (``bench/curve_bench.py`` measures it); small calls pay little, and same-host buffers
#: that travel through shared memory are not encrypted at all (only their names cross the socket).
FROM_ENV: Final = _FromEnv()
CurveDir = str | os.PathLike[str] | _FromEnv | None


@dataclass(frozen=True)
class CurveConfig:
    """A cluster's client keypair (z85-encoded, 40 bytes each) and the client keys its servers accept.

    One keypair per cluster, in a key directory (:func:`generate_cluster_keys`) that a launcher ships to each host
    (files mode 0600) and names in ``MILES_CURVE_DIR``. A server accepts a connection only when the client proves
    it holds an authorised client secret (checked by a ZAP handler); any other peer fails the handshake, so none
    of its messages ever reach the actor. Holding the client key lets a process call any actor's public methods
    with checked arguments, nothing more: construction and shutdown need the spawner's token, which no key gives.
    """

    directory: str
    client_public: bytes
    client_secret: bytes
    authorized_clients: frozenset[bytes]

    def __repr__(self) -> str:  # never print secrets
        return f"CurveConfig({self.directory!r}, {len(self.authorized_clients)} authorised client key(s))"


@dataclass(frozen=True)
class ServerKeys:
    """One actor's own CURVE keypair (z85).

    Its spawner draws it and hands the secret to that one process on its stdin (with the spawn token,
    runtime.core.control_auth); the public key travels in the actor's handles. A client checks it in the
    handshake, so nobody can pose as an actor without that actor's own secret, and one compromised worker can
    impersonate no other actor.
    """

    public: bytes
    secret: bytes

    @classmethod
    def new(cls) -> ServerKeys:
        public, secret = zmq.curve_keypair()
        return cls(public, secret)

    @classmethod
    def from_secret(cls, secret: str | bytes) -> ServerKeys:
        """The keypair of a z85 secret; CurveKeyError if it is not one."""
        raw = secret.encode() if isinstance(secret, str) else secret
        try:
            return cls(zmq.curve_public(raw), raw)
        except (zmq.ZMQError, ValueError) as exc:
            raise CurveKeyError(f"not a z85 CURVE secret key: {exc}") from None

    def __repr__(self) -> str:  # never print the secret
        return f"ServerKeys(public={self.public.decode()!r})"


def _write_secret_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, mode 0600 from the first byte."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _certificate(public: bytes, secret: bytes | None) -> str:
    """The ZPL certificate format of ``zmq.auth`` (so its tools read our files)."""
    lines = ["#   ****  miles-actors cluster key: keep it secret  ****", "metadata", "curve"]
    lines.append(f'    public-key = "{public.decode()}"')
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode()}"')
    return "\n".join(lines) + "\n"


def generate_cluster_keys(directory: str | os.PathLike[str], *, overwrite: bool = False) -> CurveConfig:
    """Create the cluster's client keypair in ``directory`` (mode 0700, files 0600); returns it loaded.
    (Actor keypairs are not kept on disk: each spawner draws one per actor, see :class:`ServerKeys`.)"""
    folder = Path(directory)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    if not overwrite:
        existing = [name for name in (CLIENT_KEY,) if (folder / name).exists()]
        if existing:
            raise CurveKeyError(
                f"{folder} already holds keys ({', '.join(existing)}); load them with load_curve_keys, "
                "or pass overwrite=True to replace them (every process must then get the new files)"
            )
    public, secret = zmq.curve_keypair()
    _write_secret_file(folder / (CLIENT_KEY + _SECRET_SUFFIX), _certificate(public, secret))
    _write_secret_file(folder / CLIENT_KEY, _certificate(public, None))
    return load_curve_keys(folder)


def _check_private(path: Path) -> None:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CurveKeyError(
            f"secret key file {path} is accessible by group or others (mode {stat.S_IMODE(mode):04o}); "
            f"run `chmod 600 {path}`"
        )


def _load_pair(folder: Path, name: str) -> tuple[bytes, bytes]:
    path = folder / (name + _SECRET_SUFFIX)
    if not path.is_file():
        raise CurveKeyError(
            f"missing CURVE key file {path}: generate the cluster keys with transport.security."
            f"generate_cluster_keys({str(folder)!r}) and ship the directory to every host"
        )
    _check_private(path)
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise CurveKeyError(f"cannot read CURVE key file {path}: {exc}") from exc
    if not public or not secret or len(public) != 40 or len(secret) != 40:
        raise CurveKeyError(f"CURVE key file {path} does not hold a z85 public and secret key")
    return public, secret


def load_curve_keys(directory: str | os.PathLike[str]) -> CurveConfig:
    """Read the cluster keys from ``directory``; raises CurveKeyError naming the file and the fix."""
    folder = Path(directory)
    if not folder.is_dir():
        raise CurveKeyError(f"CURVE key directory {folder} does not exist ({CURVE_DIR_ENV} or curve_dir)")
    client_public, client_secret = _load_pair(folder, CLIENT_KEY)
    authorized = {client_public}
    extra = folder / AUTHORIZED_DIR
    if extra.is_dir():
        for path in sorted(extra.glob("*.key")):
            public, _ = zmq.auth.load_certificate(path)
            authorized.add(public)
    return CurveConfig(str(folder.resolve()), client_public, client_secret, frozenset(authorized))


@functools.lru_cache(maxsize=16)
def _load_cached(directory: str) -> CurveConfig:
    return load_curve_keys(directory)


def resolve(curve_dir: CurveDir = FROM_ENV) -> CurveConfig | None:
    """The keys for a ``curve_dir`` option: FROM_ENV reads ``MILES_CURVE_DIR``, None means no CURVE."""
    if isinstance(curve_dir, _FromEnv):
        curve_dir = os.environ.get(CURVE_DIR_ENV) or None
    if curve_dir is None:
        return None
    return _load_cached(os.fspath(curve_dir))


# ---- sockets ---------------------------------------------------------------------------------------------------


def secure_server(socket: zmq.Socket, keys: ServerKeys) -> None:
    """Make ``socket`` (not yet bound) a CURVE server holding the actor's own ``keys``. Which clients it admits
    is the ZAP gate's part (:class:`transport.zap_gate.ZapGate`, which ``sockets.router`` puts in front)."""
    socket.curve_server = True
    socket.curve_secretkey = keys.secret
    socket.curve_publickey = keys.public


def secure_client(socket: zmq.Socket, config: CurveConfig, server_key: bytes) -> None:
    """Make ``socket`` (not yet connected) a CURVE client of the actor whose public key is ``server_key``."""
    socket.curve_serverkey = server_key
    socket.curve_publickey = config.client_public
    socket.curve_secretkey = config.client_secret


class HandshakeFailures:
    """Tells handshake failures that reconnecting will not heal from transient ones, from socket monitor events.

    A refused client key and a reported mechanism mismatch are final at once. A CURVE client whose server key
    is not the server's own, or whose peer does not use CURVE, often sees only bare failures (the server hangs
    up): ``streak`` of them in a row, with no success between, are final too (a server that dies
    mid-handshake causes one, not several).
    """

    EVENTS = (
        zmq.EVENT_HANDSHAKE_FAILED_AUTH
        | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
        | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
        | zmq.EVENT_HANDSHAKE_SUCCEEDED
    )

    def __init__(self, *, curve: bool, streak: int = 5) -> None:
        self.curve = curve
        self.streak = streak
        self._failures = 0

    def observe(self, event: int, value: int) -> str | None:
        """The reason the handshakes will keep failing, or None."""
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self._failures = 0
            return None
        if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH and value == zap_gate.FULL_STATUS:
            return (
                "the actor refused the connection: it has as many open as it allows (MILES_MAX_CONNECTIONS on "
                "the actor's host); close idle clients or raise the limit"
            )
        if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            return (
                f"the actor refused this process's CURVE client key (ZAP status {value}); "
                f"give it the cluster's keys ({CURVE_DIR_ENV})"
            )
        if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            return (
                "security mismatch: one side uses CURVE and the other does not; "
                f"set the same {CURVE_DIR_ENV} for every process of the job"
            )
        if event in (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL) and self.curve:
            self._failures += 1
            if self._failures >= self.streak:
                return (
                    f"{self._failures} CURVE handshakes failed in a row: the peer does not use CURVE, or it does "
                    "not hold the actor key this handle names (another process now listens at that address?)"
                )
        return None
