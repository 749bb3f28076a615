"""The server side of an actor process: its socket, its phase, and how it starts, serves, leaves and stops.

PING is answered here; SUBMIT, POLL and ACK go to call routing (:mod:`runtime.actor.call_routing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import zmq

from runtime.actor import actor_exit
from runtime.actor.call_routing import CallRouter
from runtime.actor.call_runner import CallRunner
from runtime.actor.call_store import CallRecord, CallState, CallStore, StoreLimits
from runtime.actor.server_lanes import ServerLanes
from runtime.actor.server_phase import LEAVING_PHASES, PhaseMachine, ServerPhase
from runtime.actor.stream_table import StreamTable
from runtime.core.loop_work import LoopWork
from runtime.core.metadata import ActorClassInfo
from runtime.core.outcome import error_frames
from transport import frames as wire
from transport import shared_memory
from transport.codec import Buffer
from transport.endpoints import ZmqEndpoint
from transport.frames import FrameError
from transport.header_checks import BadHeader
from transport.messages import Ping, Pong
from transport.protocol import DEFAULT_MAX_HEADER_BYTES, DEFAULT_MAX_MESSAGE_BYTES, Kind
from transport.security import CurveConfig, ServerKeys
from transport.sockets import router, shared_context
from transport.waker import Waker

log = logging.getLogger(__name__)

_IDLE_RECEIVE_SLICE_S = 1.0  # an idle lane thread reading the socket looks at its queue at least this often
_LEAVE_GRACE_S = 1.0  # a leaving process waits at most this long for its last answers to be acknowledged
_LEAVE_CHECK_S = 0.01


class ActorServer:
    """Serves one actor instance (constructed later by the ``__construct__`` control call).

    The loop is the control lane: it keeps answering health checks and polls while a sync method runs. A lane
    thread records and sends its own results (the call store and the socket are thread-safe).
    """

    def __init__(
        self,
        *,
        bind: str,
        limits: StoreLimits | None = None,
        context: zmq.Context | None = None,
        curve: CurveConfig | None = None,
        spawn_token: bytes | None = None,
        server_keys: ServerKeys | None = None,
    ) -> None:
        self.bind_address = bind
        self.curve = curve
        self.server_keys = server_keys if server_keys is not None else ServerKeys.new()  # the actor's own
        self.boot_id = os.urandom(8).hex()
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.machine_id = shared_memory.machine_id()
        self.started_at = time.time()
        self.store = CallStore(limits or StoreLimits())
        self.store.release_files = lambda names: self._on_loop(lambda: shared_memory.unlink(names))
        self.context = context or shared_context()
        self.instance: Any = None
        self.info: ActorClassInfo | None = None
        self.name = f"actor-{self.pid}"
        self.endpoint: ZmqEndpoint | None = None
        self.address = ""
        self.stats = {
            "calls_total": 0,
            "errors_total": 0,
            "rejected_total": 0,
            "duplicates_total": 0,
            "unauthorized_total": 0,
            "stale_ids_total": 0,  # SUBMITs refused because the store may have forgotten their id (call_store)
        }
        self.stopped = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._loop_work: LoopWork | None = None  # what lane threads hand to the loop
        self._sweeper: asyncio.Task[None] | None = None
        self.hooks: list[Callable[[str, str, float], None]] = []  # (method, outcome, seconds) observers
        self.metrics_port: int | None = None  # where /metrics is served, if it is
        self.restarts = 0  # how often the spawner restarted this actor before this incarnation
        self._phase = PhaseMachine()
        self.leaving: str | None = None  # why the process leaves (set as it enters LEAVING or STOPPING): every
        # call is told so from then on
        self.exit_code = 0  # the process's exit code once it has stopped (runtime.actor.actor_exit)
        self._stopper: asyncio.Future[None] | None = None
        self._farewells: list[CallRecord] = []  # calls answered with ActorDied as the process leaves
        self._lanes = ServerLanes()
        self.streams = StreamTable()  # generator methods' items on their way to the caller (runtime.actor.stream_table)
        self._router = CallRouter(
            store=self.store,
            lanes=self._lanes,
            runner=CallRunner(self),
            phase=self._phase,
            send=self._send,
            on_loop=self._on_loop,
            stats=self.stats,
            boot_id=self.boot_id,
            spawn_token=spawn_token,
            actor=self.name,
        )
        # Call routing deduplicates, admits (runtime.actor.admission) and routes each call to its lane
        # (runtime.actor.server_lanes); the call runner (runtime.actor.call_runner) runs it.
        calls = self._router
        self._handlers: dict[Kind, Callable[[bytes, wire.Message], None]] = {
            Kind.SUBMIT: calls.on_submit,
            Kind.POLL: calls.on_poll,
            Kind.ACK: calls.on_ack,
            Kind.PING: self._on_ping,
        }

    @property
    def phase(self) -> ServerPhase:
        """Where the server is in its life: created, listening, constructing, serving, leaving, stopping, stopped,
        moving only along :mod:`runtime.actor.server_phase`'s table."""
        return self._phase.now

    # ---- lifecycle -------------------------------------------------------------------------------------------

    async def start(self, *, serves_actor: bool = True) -> str:
        """Bind and start serving; returns the bound address. ``serves_actor=False``: the process is no actor (a
        driver serving its object refs), so ``exit_actor()`` stays refused there."""
        if self._phase.move(ServerPhase.LISTENING) is None:
            raise RuntimeError(f"server {self.name!r} is {self.phase.value}: it starts only once")
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._loop_work = LoopWork(self._loop, self._loop_thread, name=self.name)
        self.endpoint, self.address = router(
            self.context,
            self.bind_address,
            self._on_frames,
            max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES,
            curve=self.curve,
            server_keys=self.server_keys,
        )
        self.endpoint.start()
        self._lanes.open_construct_lane(self._router.finish)
        self.set_limits(self.store.limits)
        if serves_actor:
            actor_exit.mark_serving(self.name)
        return self.address

    @property
    def public_address(self) -> str:
        """The address other hosts can reach: a wildcard bind is named by ``MILES_ADVERTISE_HOST`` or hostname."""
        scheme, _, rest = self.address.partition("://")
        host, _, port = rest.rpartition(":")
        if host in ("0.0.0.0", "*", "[::]", "::"):
            host = os.environ.get("MILES_ADVERTISE_HOST") or self.host
        return f"{scheme}://{host}:{port}"

    def set_limits(self, limits: StoreLimits) -> None:
        """Apply new call-store limits; the expiry timer follows the new TTL at once. Thread-safe."""
        self.store.limits = limits

        def restart() -> None:
            if self._sweeper is not None:
                self._sweeper.cancel()
            self._sweeper = asyncio.ensure_future(self._sweep_forever())

        if threading.get_ident() == self._loop_thread:
            restart()
        else:
            self._loop.call_soon_threadsafe(restart)

    def configure(self, info: ActorClassInfo, instance: Any, name: str, max_concurrency: int | None) -> None:
        """Install the constructed instance and its lanes (called by ``__construct__``, or at once by an in-process
        server of a driver); ``max_concurrency`` as :meth:`ServerLanes.open` takes it."""
        self._lanes.open(info, name, max_concurrency, self._router.finish, self._receive_while_idle)
        self.name, self.instance = name, instance
        self.info = info
        self._router.serve(info, name)
        self._phase.move(ServerPhase.SERVING)  # refused if the process began to leave meanwhile: it stays leaving

    def leave(self, code: int, cause: str) -> str:
        """Leave the process with exit ``code`` because of ``cause`` (runtime.actor.actor_exit): every call in flight
        or queued is answered with ActorDied at once, later ones are refused the same way, and the process stops
        once those answers are acknowledged (at most ``_LEAVE_GRACE_S`` later). Any thread; the first call
        decides the code. Returns what callers are told."""
        if self._begin_leaving(ServerPhase.LEAVING, code, f"actor {self.name!r} exits with code {code}: {cause}"):
            log.warning("%s", self.leaving)
            self._answer_in_flight()
            self._on_loop(self._stop_soon)
        return self.leaving

    def _begin_leaving(self, to: ServerPhase, code: int, reason: str) -> bool:
        """Move to ``to`` (LEAVING or STOPPING); the first move into a leaving phase decides the exit code and
        what callers are told, refuses new SUBMITs and drops queued calls. Returns whether the move was made."""

        def entering(left: ServerPhase) -> None:
            if left not in LEAVING_PHASES:
                self.exit_code, self.leaving = code, f"{reason}; calls in flight did not finish"

        left = self._phase.move(to, entering=entering)
        if left is None:
            return False
        if left not in LEAVING_PHASES:
            # New SUBMITs get ActorDied from now on; a new handler, so the common path pays nothing.
            leaving = functools.partial(self._router.on_submit_while_leaving, reason=self.leaving)
            self._handlers = {**self._handlers, Kind.SUBMIT: leaving}
            self._lanes.discard_queued()  # answered by the caller of this: they must not run
        return True

    def _answer_in_flight(self) -> None:
        """Answer every call still running or queued with ActorDied (``leaving`` says why)."""
        with self.store.lock:
            running = [r for r in self.store.records.values() if r.state is CallState.RUNNING]
        now = time.monotonic()
        for record in running:
            frames = error_frames(record.call_id, self.boot_id, "exited", self.leaving)
            if self.store.finish(record, frames, now):  # else it was answered meanwhile
                self._farewells.append(record)
                with contextlib.suppress(ConnectionError):
                    self._send(record.peer, frames)

    def _stop_soon(self) -> None:
        if self._stopper is None:
            self._stopper = asyncio.ensure_future(self.stop())

    async def stop(self) -> None:
        """Stop serving, then set ``stopped``: calls in flight or queued are answered with ActorDied first, and
        those answers get up to ``_LEAVE_GRACE_S`` to be acknowledged (callers do so at once). Idempotent."""
        reason = f"actor {self.name!r} is shutting down (shutdown call, a signal, or its parent left)"
        if not self._begin_leaving(ServerPhase.STOPPING, 0, reason):
            return
        if self._sweeper is not None:
            self._sweeper.cancel()
        self._lanes.cancel_async()  # their calls are answered: what they return is not sent
        deadline = time.monotonic() + _LEAVE_GRACE_S
        while True:
            self._answer_in_flight()  # also a call accepted while this process began to leave
            records = self.store.records
            if not any(records.get(r.call_id) is r for r in self._farewells) or time.monotonic() >= deadline:
                break
            await asyncio.sleep(_LEAVE_CHECK_S)
        self._lanes.stop()
        if self.endpoint is not None:
            self.endpoint.close()
        self._phase.move(ServerPhase.STOPPED)
        self.stopped.set()

    async def _sweep_forever(self) -> None:
        while True:
            interval = min(max(self.store.limits.result_ttl_s / 4, 0.05), 30.0)
            await asyncio.sleep(interval)
            expired = self.store.expire(time.monotonic())
            if expired:
                log.info(
                    "%s: expired %d unacknowledged results (result_ttl_s=%s)",
                    self.name,
                    expired,
                    self.store.limits.result_ttl_s,
                )

    # ---- receiving -------------------------------------------------------------------------------------------

    def _receive_while_idle(self, waker: Waker) -> bool:
        endpoint = self.endpoint
        if endpoint is None or endpoint.closed:
            return False
        endpoint.receive_here(_IDLE_RECEIVE_SLICE_S, waker)
        return True

    def _on_loop(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the event loop: async tasks, control-plane and built-in methods belong there."""
        self._loop_work.run_soon(fn)

    def _on_frames(self, frames: list[Any]) -> None:
        """Handle one message, quickly and without blocking, on whichever reader holds the socket (the endpoint runs
        one at a time): the event loop, or the default lane's thread while it is idle (a call for that lane then
        runs on the thread that read it, with no hand-off)."""
        peer = frames[0]
        if type(peer) is not bytes:  # a ZeroMQ frame (direct links give bytes)
            peer = peer.bytes
        try:
            message = wire.unpack(frames[1:], max_header_bytes=DEFAULT_MAX_HEADER_BYTES)
            self._handlers[message.kind](peer, message)
        except (FrameError, KeyError) as exc:
            self.endpoint.stats.drop("malformed")
            log.debug("%s: dropped a malformed message: %s", self.name, exc)
        except BadHeader as exc:
            self.endpoint.stats.drop(exc.reason)
            log.debug("%s: dropped a %s: %s", self.name, exc.reason, exc)

    def _send(self, peer: bytes, frames: list[Buffer]) -> None:
        self.endpoint.send([peer, *frames])

    def _on_ping(self, peer: bytes, message: wire.Message) -> None:
        nonce = Ping.parse(message.meta).nonce
        stats = {"constructed": self.instance is not None, "calls": len(self.store.records)}
        self._send(peer, Pong(nonce, self.boot_id, stats).pack())

    # ---- what runs -------------------------------------------------------------------------------------------

    def in_flight(self) -> dict[str, int]:
        """Calls running or queued, per lane."""
        return self._lanes.in_flight()

    def lane_load(self) -> dict[str, tuple[int, int]]:
        """(running, queued) per lane; async tasks count as running. Safe to call from any thread."""
        return self._lanes.load()

    def lane_failures(self) -> int:
        """Exceptions that escaped a lane thread's job, delivery or idle read (each one logged)."""
        return self._lanes.failures()

    def cancel(self, record: CallRecord) -> str:
        """Cancel an accepted call (:meth:`runtime.actor.server_lanes.ServerLanes.cancel`); returns what was done."""
        return self._lanes.cancel(record)
