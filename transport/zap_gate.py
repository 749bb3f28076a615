"""The ZAP handler of a ZeroMQ context: which connections an actor's socket admits.

It keeps one peer that opens thousands of connections from taking every file descriptor (the actor goes on serving
the connections it has), and with CURVE admits only authorised client keys.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import resource
import threading
from dataclasses import dataclass
from typing import Final

import zmq
from zmq.utils import z85
from zmq.utils.monitor import parse_monitor_message

log = logging.getLogger(__name__)

_ZAP_ADDRESS: Final = "inproc://zeromq.zap.01"
_ZAP_VERSION: Final = b"1.0"
#: Environment variable: the most connections one actor socket keeps open at once.
MAX_CONNECTIONS_ENV: Final = "MILES_MAX_CONNECTIONS"
DEFAULT_MAX_CONNECTIONS: Final = 10_000
_FD_HEADROOM = 256  # descriptors kept for everything else a process opens (files, pipes, other sockets)
_POLL_MS = 200
#: The ZAP status of a refusal for too many connections (300, "temporary", would keep the connection open).
FULL_STATUS: Final = 500
_LOGGED_REFUSALS = 20


def default_max_connections() -> int:
    """``MILES_MAX_CONNECTIONS`` (default 10000), and never more than the open-file limit leaves room for."""
    text = os.environ.get(MAX_CONNECTIONS_ENV, "")
    try:
        wanted = int(text) if text else DEFAULT_MAX_CONNECTIONS
    except ValueError:
        raise ValueError(f"{MAX_CONNECTIONS_ENV} must be a whole number of connections, got {text!r}") from None
    if wanted < 1:
        raise ValueError(f"{MAX_CONNECTIONS_ENV} must be at least 1, got {wanted}")
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        wanted = min(wanted, max(16, soft - _FD_HEADROOM))
    return wanted


@dataclass
class _Guarded:
    """One guarded socket, as the gate's thread sees it."""

    max_connections: int
    curve_keys: frozenset[bytes] | None  # None: no CURVE, any peer may connect
    monitor: zmq.Socket
    open: int = 0
    refused: int = 0


class ZapGate:
    """One per context: a thread answering ZAP requests for every socket guarded in that context.

    libzmq asks the handler (the ZAP protocol, RFC 27) about every new connection to a socket that names a ZAP
    domain, before any of that peer's messages reach the socket. Open connections are counted from the socket's own
    monitor events (accepted, disconnected), read by the gate's thread, so the count and the answers never race.
    """

    _gates: dict[int, ZapGate] = {}
    _gates_lock = threading.Lock()

    def __init__(self, context: zmq.Context) -> None:
        self.context = context
        self._zap = context.socket(zmq.REP)
        self._zap.linger = 0
        self._zap.bind(_ZAP_ADDRESS)
        self._guarded: dict[bytes, _Guarded] = {}
        self._commands: queue.SimpleQueue[tuple[str, bytes, _Guarded | None]] = queue.SimpleQueue()
        self._poller = zmq.Poller()  # the gate's thread's alone
        self._stopping = threading.Event()
        self._names = itertools.count()
        self._refusals_logged = 0
        self._thread = threading.Thread(target=self._serve, name="zap-gate", daemon=True)
        self._thread.start()

    @classmethod
    def of(cls, context: zmq.Context) -> ZapGate:
        """The gate of ``context``, started on first use."""
        with cls._gates_lock:
            gate = cls._gates.get(id(context))
            if gate is None:
                gate = cls._gates[id(context)] = cls(context)
            return gate

    @classmethod
    def stop(cls, context: zmq.Context, timeout_s: float = 5.0) -> None:
        """Stop ``context``'s gate, if any: call it before terminating a context of your own."""
        with cls._gates_lock:
            gate = cls._gates.pop(id(context), None)
        if gate is not None:
            gate._stopping.set()
            gate._thread.join(timeout_s)

    def guard(self, socket: zmq.Socket, *, max_connections: int, curve_keys: frozenset[bytes] | None) -> bytes:
        """Put ``socket`` (not yet bound) behind the gate; returns its ZAP domain (for :meth:`release`)."""
        domain = f"miles-{os.getpid()}-{next(self._names)}".encode()
        address = f"inproc://miles-zap-monitor-{domain.decode()}"
        socket.monitor(address, zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        monitor = self.context.socket(zmq.PAIR)
        monitor.linger = 0
        monitor.connect(address)  # here, before any connection: no event is lost; the thread owns it from now on
        socket.zap_domain = domain
        try:  # refuse every client if the handler were ever missing (needs libzmq's draft API)
            socket.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
        except (zmq.ZMQError, AttributeError):
            pass
        self._commands.put(("add", domain, _Guarded(max_connections, curve_keys, monitor)))
        return domain

    def release(self, domain: bytes) -> None:
        """Forget a socket that is being closed."""
        self._commands.put(("remove", domain, None))

    def counts(self, domain: bytes) -> dict[str, int]:
        """Open and refused connections of a guarded socket (a snapshot; the gate's thread updates them)."""
        guarded = self._guarded.get(domain)
        return {"open": guarded.open, "refused": guarded.refused} if guarded else {"open": 0, "refused": 0}

    # ---- the gate's thread ---------------------------------------------------------------------------------

    def _serve(self) -> None:
        self._poller.register(self._zap, zmq.POLLIN)
        try:
            while not self._stopping.is_set():
                self._apply_commands()
                ready = dict(self._poller.poll(_POLL_MS))
                if ready.get(self._zap):
                    request = self._zap.recv_multipart()
                    self._apply_commands()  # the socket asked about may have been guarded during the poll
                    self._read_monitors()  # its ACCEPTED event came before this request
                    self._answer(request)
                else:
                    self._read_monitors()
        except zmq.ContextTerminated:
            pass
        finally:
            for guarded in self._guarded.values():
                guarded.monitor.close(linger=0)
            self._zap.close(linger=0)

    def _apply_commands(self) -> None:
        while True:
            try:
                op, domain, guarded = self._commands.get_nowait()
            except queue.Empty:
                return
            if op == "add" and guarded is not None:
                self._guarded[domain] = guarded
                self._poller.register(guarded.monitor, zmq.POLLIN)
            elif op == "remove" and domain in self._guarded:
                old = self._guarded.pop(domain)
                self._poller.unregister(old.monitor)
                old.monitor.close(linger=0)

    def _read_monitors(self) -> None:
        for guarded in self._guarded.values():
            while guarded.monitor.poll(0):
                event = parse_monitor_message(guarded.monitor.recv_multipart())["event"]
                if event == zmq.EVENT_ACCEPTED:
                    guarded.open += 1
                elif event == zmq.EVENT_DISCONNECTED:
                    guarded.open = max(0, guarded.open - 1)

    def _answer(self, request: list[bytes]) -> None:
        if len(request) < 6:
            self._reply(request[1] if len(request) > 1 else b"", b"400", b"malformed ZAP request")
            return
        version, request_id, domain, address, _identity, mechanism = request[:6]
        guarded = self._guarded.get(domain)
        peer = address.decode(errors="replace")
        if version != _ZAP_VERSION or guarded is None:
            self._reply(request_id, b"400", b"unknown ZAP domain")
        # Over max_connections: status 500, which the client sees as such, and libzmq closes the connection at
        # once. A connection still in its handshake counts as open (it holds a descriptor too), so a burst of
        # connections is refused down to fewer than max_connections, never past it.
        elif guarded.open > guarded.max_connections:  # the count includes this connection
            guarded.refused += 1
            self._log_refusal(f"refused a connection from {peer}: max_connections={guarded.max_connections} are open")
            self._reply(request_id, str(FULL_STATUS).encode(), b"too many connections")
        elif guarded.curve_keys is not None and not self._authorised(guarded.curve_keys, mechanism, request[6:]):
            guarded.refused += 1
            self._log_refusal(f"refused a CURVE client from {peer} with an unknown public key")
            self._reply(request_id, b"400", b"unknown client key")
        else:
            self._reply(request_id, b"200", b"OK")

    @staticmethod
    def _authorised(keys: frozenset[bytes], mechanism: bytes, credentials: list[bytes]) -> bool:
        key = credentials[0] if mechanism == b"CURVE" and credentials else b""
        return len(key) == 32 and z85.encode(key) in keys

    def _reply(self, request_id: bytes, status: bytes, text: bytes) -> None:
        self._zap.send_multipart([_ZAP_VERSION, request_id, status, text, b"", b""])

    def _log_refusal(self, message: str) -> None:
        self._refusals_logged += 1
        level = logging.WARNING if self._refusals_logged <= _LOGGED_REFUSALS else logging.DEBUG
        log.log(level, "%s", message)
