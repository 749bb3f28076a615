"""Launcher side of one host agent: JSON-line requests, an event reader thread, heartbeats, orderly close."""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, BinaryIO

from launcher.agent import agent_commands as commands
from launcher.agent import agent_protocol as proto
from launcher.errors import AgentError

log = logging.getLogger(__name__)

EventCallback = Callable[[str, dict[str, Any]], None]


class AgentLink:
    """One connected host agent (over a local pipe or an SSH exec channel).

    Every event is passed to ``on_event(host, event)`` from the reader thread; events answering a request
    (same ``req``) also wake ``request()``. When the stream ends, pending requests fail and ``on_event``
    gets a synthesized ``agent_lost`` event.
    """

    def __init__(
        self,
        host: str,
        *,
        send_stream: BinaryIO,
        recv_stream: BinaryIO,
        close_transport: Callable[[], None],
        on_event: EventCallback,
        heartbeat_interval_s: float,
        heartbeat_timeout_s: float = 0.0,
        stderr_stream: BinaryIO | None = None,
    ) -> None:
        self.host = host
        self._send_stream = send_stream
        self._recv_stream = recv_stream
        self._stderr_stream = stderr_stream
        self._close_transport = close_transport
        self._on_event = on_event
        self._heartbeat_interval_s = heartbeat_interval_s
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self._last_heard = time.monotonic()
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self._req_ids = itertools.count(1)
        self._closed = threading.Event()
        self._closing = False  # shutdown sent: the stream ending is expected
        self._lost: str | None = None
        self.hello: dict[str, Any] | None = None
        self.key_dir: str | None = None  # the CURVE key directory on the host (the transport removes it on close)
        self.stderr_tail: deque[str] = deque(maxlen=30)
        self._threads: list[threading.Thread] = []

    @property
    def alive(self) -> bool:
        """True until the agent's stream ended or the link was closed."""
        return self._lost is None and not self._closed.is_set()

    def start(self) -> None:
        """Start the reader, stderr and heartbeat threads."""
        targets: list[tuple[str, Callable[[], None]]] = [
            ("events", self._read_events),
            ("hb", self._heartbeat),
        ]
        if self._stderr_stream is not None:
            targets.append(("stderr", self._read_stderr))
        for name, target in targets:
            thread = threading.Thread(target=target, name=f"agent-{self.host}-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def wait_hello(self, timeout_s: float) -> dict[str, Any]:
        """Wait for the agent's ``hello``; AgentError (with its stderr) if it dies or stays silent."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self.hello is None and self._lost is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
        if self.hello is None:
            time.sleep(0.1)  # let the stderr thread catch the agent's last words
            why = self._lost or f"no hello within {timeout_s:g}s"
            raise AgentError(f"host {self.host!r}: host agent did not start ({why}){self._stderr_hint()}")
        return self.hello

    def send(self, command: commands.Command, req: int | None = None) -> None:
        """Fire-and-forget command; AgentError if the agent is gone."""
        data = commands.encode(command, req)
        with self._send_lock:
            if not self.alive:
                raise AgentError(f"host {self.host!r}: host agent is gone ({self._lost or 'closed'})")
            try:
                self._send_stream.write(data)
                self._send_stream.flush()
            except (OSError, ValueError, EOFError) as exc:
                self._mark_lost(f"write failed: {exc!r}")
                raise AgentError(f"host {self.host!r}: cannot reach host agent: {exc!r}") from None

    def request(self, command: commands.Command, *, timeout_s: float) -> dict[str, Any]:
        """Send a command and wait for the event that answers it."""
        req, op = next(self._req_ids), command.OP
        self.send(command, req)
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while req not in self._replies:
                remaining = deadline - time.monotonic()
                if self._lost is not None:
                    raise AgentError(f"host {self.host!r}: host agent lost during {op}: {self._lost}")
                if remaining <= 0:
                    raise AgentError(f"host {self.host!r}: host agent did not answer {op} within {timeout_s:g}s")
                self._cond.wait(remaining)
            reply = self._replies.pop(req)
        if reply.get("ev") == proto.EV_ERROR:
            raise AgentError(f"host {self.host!r}: host agent refused {op}: {reply.get('error')}")
        return reply

    def close(self, grace_s: float, timeout_s: float) -> None:
        """Ask the agent to stop every process (SIGTERM, ``grace_s``, SIGKILL) and exit, then drop the link."""
        self._closing = True
        if self.alive:
            with contextlib.suppress(AgentError):
                self.send(commands.Shutdown(grace_s))
                deadline = time.monotonic() + timeout_s
                with self._cond:
                    while self._lost is None and time.monotonic() < deadline:
                        self._cond.wait(min(0.2, max(0.0, deadline - time.monotonic())))
        self._closed.set()
        with contextlib.suppress(Exception):
            self._close_transport()

    def _read_events(self) -> None:
        reason = "agent stream ended"
        try:
            for raw in iter(self._recv_stream.readline, b""):
                self._last_heard = time.monotonic()
                try:
                    event = proto.decode(raw)
                except ValueError:
                    log.warning("host %s: unparsable agent line %r", self.host, raw[:200])
                    continue
                self._dispatch(event)
                if event.get("ev") == proto.EV_BYE:
                    reason = f"agent exited ({event.get('reason')})"
                    break
        except (OSError, ValueError, EOFError) as exc:
            reason = f"agent stream broke: {exc!r}"
        self._mark_lost(reason)

    def _dispatch(self, event: dict[str, Any]) -> None:
        ev = event.get("ev")
        if ev == proto.EV_HELLO:
            with self._cond:
                self.hello = event
                self._cond.notify_all()
        req = event.get("req")
        if req is not None:
            with self._cond:
                self._replies[int(req)] = event
                self._cond.notify_all()
        try:
            self._on_event(self.host, event)
        except Exception:
            log.exception("host %s: event handler failed on %s", self.host, ev)

    def _mark_lost(self, reason: str) -> None:
        with self._cond:
            if self._lost is not None:
                return
            self._lost = reason
            self._cond.notify_all()
        expected = self._closing or self._closed.is_set() or self.hello is None  # no hello: wait_hello says why
        if not expected:
            log.warning("host %s: %s%s", self.host, reason, self._stderr_hint())
        with contextlib.suppress(Exception):
            self._on_event(self.host, {"ev": proto.EV_AGENT_LOST, "reason": reason, "closing": expected})

    def _read_stderr(self) -> None:
        assert self._stderr_stream is not None
        with contextlib.suppress(OSError, ValueError, EOFError):
            for raw in iter(self._stderr_stream.readline, b""):
                line = raw.decode(errors="replace").rstrip()
                self.stderr_tail.append(line)
                log.info("host %s agent: %s", self.host, line)

    def _heartbeat(self) -> None:
        while not self._closed.wait(self._heartbeat_interval_s):
            if self._lost is not None:
                return
            silent = time.monotonic() - self._last_heard
            started = self.hello is not None  # before its hello, wait_hello's deadline decides (a slow start)
            if started and self._heartbeat_timeout_s > 0 and silent > self._heartbeat_timeout_s and not self._closing:
                self._mark_lost(f"no heartbeat from the host agent for {silent:.0f}s: the host is down, its agent "
                                "was stopped or the network between us is cut")  # fmt: skip
                with contextlib.suppress(Exception):
                    self._close_transport()
                return
            with contextlib.suppress(AgentError):
                self.send(commands.Heartbeat())

    def _stderr_hint(self) -> str:
        tail = [line for line in self.stderr_tail if line.strip()][-8:]
        return ("; agent stderr:\n    " + "\n    ".join(tail)) if tail else ""
