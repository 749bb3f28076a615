"""CURVE security for the actor transport: cluster keys on disk, socket options, and the ZAP authenticator.

A cluster has one server keypair (every actor's ROUTER) and one client keypair (every caller's DEALER). A
launcher generates them once (:func:`generate_cluster_keys`), copies the directory to each host (files stay mode
0600) and sets ``MILES_CURVE_DIR`` for every process; the runtime then secures every socket by itself. A server
accepts a connection only when the client proves it holds an authorised client secret key (checked by a ZAP
handler); any other peer fails the handshake, so none of its messages ever reach the actor.

Opting out (no ``MILES_CURVE_DIR``, or ``curve_dir=None``) is for trusted networks only. Its price is speed:
CURVE encrypts and authenticates every byte on TCP (libsodium's XSalsa20-Poly1305), so large transfers between
hosts are several times slower (``bench/curve_bench.py`` measures it); small calls pay little, and same-host
buffers that travel through shared memory are not encrypted at all (only their names cross the socket).
"""

from __future__ import annotations

import functools
import logging
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

log = logging.getLogger(__name__)

#: The environment variable naming the directory that holds this cluster's keys.
CURVE_DIR_ENV: Final = "MILES_CURVE_DIR"
#: The ZAP domain of every actor socket.
ZAP_DOMAIN: Final = "miles"
SERVER_KEY = "server.key"
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
FROM_ENV: Final = _FromEnv()
CurveDir = str | os.PathLike[str] | _FromEnv | None


@dataclass(frozen=True)
class CurveConfig:
    """The keys of one cluster (z85-encoded, 40 bytes each) and the client keys its servers accept."""

    directory: str
    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes
    authorized_clients: frozenset[bytes]

    def __repr__(self) -> str:  # never print secrets
        return f"CurveConfig({self.directory!r}, {len(self.authorized_clients)} authorised client key(s))"


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
    """Create a server and a client keypair in ``directory`` (mode 0700, files 0600); returns them loaded."""
    folder = Path(directory)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    if not overwrite:
        existing = [name for name in (SERVER_KEY, CLIENT_KEY) if (folder / name).exists()]
        if existing:
            raise CurveKeyError(
                f"{folder} already holds keys ({', '.join(existing)}); load them with load_curve_keys, "
                "or pass overwrite=True to replace them (every process must then get the new files)"
            )
    for name in (SERVER_KEY, CLIENT_KEY):
        public, secret = zmq.curve_keypair()
        _write_secret_file(folder / (name + _SECRET_SUFFIX), _certificate(public, secret))
        _write_secret_file(folder / name, _certificate(public, None))
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
    server_public, server_secret = _load_pair(folder, SERVER_KEY)
    client_public, client_secret = _load_pair(folder, CLIENT_KEY)
    authorized = {client_public}
    extra = folder / AUTHORIZED_DIR
    if extra.is_dir():
        for path in sorted(extra.glob("*.key")):
            public, _ = zmq.auth.load_certificate(path)
            authorized.add(public)
    return CurveConfig(
        str(folder.resolve()), server_public, server_secret, client_public, client_secret, frozenset(authorized)
    )


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


class _AllowedKeys:
    """ZAP credentials provider: accepts exactly the authorised client public keys."""

    def __init__(self) -> None:
        self.keys: set[bytes] = set()
        self._warned: set[bytes] = set()

    def callback(self, domain: str, key: bytes) -> bool:
        if key in self.keys:
            return True
        if len(self._warned) < 100 and key not in self._warned:
            self._warned.add(key)
            log.warning("refused a CURVE client with an unknown public key %s (domain %s)", key.decode(), domain)
        return False


_authenticators: dict[int, tuple[ThreadAuthenticator, _AllowedKeys]] = {}
_auth_lock = threading.Lock()


def ensure_authenticator(context: zmq.Context, authorized: frozenset[bytes]) -> None:
    """Start (once per context) the ZAP handler that admits only ``authorized`` client keys."""
    with _auth_lock:
        entry = _authenticators.get(id(context))
        if entry is None:
            provider = _AllowedKeys()
            auth = ThreadAuthenticator(context, log=logging.getLogger("zmq.auth"))
            auth.start()  # waits at most 10 s for the thread, raising if it does not start
            auth.configure_curve_callback(domain=ZAP_DOMAIN, credentials_provider=provider)
            entry = _authenticators[id(context)] = (auth, provider)
        entry[1].keys.update(authorized)


def stop_authenticator(context: zmq.Context, timeout_s: float = 5.0) -> None:
    """Stop ``context``'s ZAP handler, if any: call it before terminating a context of your own."""
    with _auth_lock:
        entry = _authenticators.pop(id(context), None)
    if entry is None:
        return
    auth = entry[0]
    auth.pipe.send(b"TERMINATE")
    auth.thread.join(timeout_s)
    if auth.thread.is_alive():
        log.warning("the ZAP authenticator thread did not stop within %.1f s", timeout_s)
        return
    auth.pipe.close(linger=0)
    auth.pipe = None
    auth.zap_socket.close(linger=0)
    auth.zap_socket = None


def secure_server(socket: zmq.Socket, config: CurveConfig) -> None:
    """Make ``socket`` (not yet bound) a CURVE server that admits only the cluster's clients."""
    ensure_authenticator(socket.context, config.authorized_clients)
    socket.curve_server = True
    socket.curve_secretkey = config.server_secret
    socket.curve_publickey = config.server_public
    socket.zap_domain = ZAP_DOMAIN.encode()
    try:  # refuse every client if the ZAP handler were ever missing (needs libzmq's draft API)
        socket.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
    except (zmq.ZMQError, AttributeError):
        pass


def secure_client(socket: zmq.Socket, config: CurveConfig) -> None:
    """Make ``socket`` (not yet connected) a CURVE client of the cluster's servers."""
    socket.curve_serverkey = config.server_public
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
                    f"{self._failures} CURVE handshakes failed in a row: the peer does not use CURVE, or its server "
                    f"key is not the one in this process's keys (a different {CURVE_DIR_ENV}?)"
                )
        return None
