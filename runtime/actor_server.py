"""The server side of an actor process: one ROUTER socket, the call store, and the lanes that run methods.

Messages are handled one at a time, quickly and without blocking, by whichever reader holds the socket: the
event loop, or the default lane's thread while it is idle (a call for that lane then runs on the thread that
read it, with no hand-off). SUBMITs are deduplicated and routed: sync methods to their group's thread lane,
async methods as tasks on their group's own loop (:mod:`runtime.group_loops`), control-plane and built-in methods
on the main loop; POLL/ACK/PING are answered at once.
The loop is the control lane: it keeps answering health checks and polls while a sync method runs. A lane
thread records and sends its own results (the call store and the socket are thread-safe). Running a call
itself (checks, the method, its outcome as RESULT frames) is :mod:`runtime.call_runner`'s part.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import zmq

from runtime import actor_exit, builtin_methods, control_auth
from runtime.call_runner import CallRunner
from runtime.call_store import CallRecord, CallState, CallStore, StoreLimits, Tombstone, request_fingerprint
from runtime.errors import CallRejected
from runtime.group_loops import GroupLoop
from runtime.lanes import ThreadLane
from runtime.loop_work import LoopWork
from runtime.metadata import DEFAULT_ASYNC_CONCURRENCY, DEFAULT_GROUP, ActorClassInfo, MethodInfo
from runtime.outcome import error_frames
from transport import frames as wire
from transport import header_checks, shared_memory
from transport.codec import Buffer
from transport.endpoints import ZmqEndpoint
from transport.frames import FrameError
from transport.header_checks import BadHeader
from transport.protocol import DEFAULT_MAX_HEADER_BYTES, DEFAULT_MAX_MESSAGE_BYTES, Kind
from transport.security import CurveConfig, ServerKeys
from transport.sockets import router
from transport.submit_header import SubmitHeader
from transport.waker import Waker

log = logging.getLogger(__name__)

_IDLE_RECEIVE_SLICE_S = 1.0  # an idle lane thread reading the socket looks at its queue at least this often
_LOGGED_REFUSALS = 20  # refused control calls logged as warnings; the rest only counted (no log flood)
_LEAVE_GRACE_S = 1.0  # a leaving process waits at most this long for its last answers to be acknowledged
_LEAVE_CHECK_S = 0.01


class ActorServer:
    """Serves one actor instance (constructed later by the ``__construct__`` control call)."""

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
        self._spawn_token = spawn_token  # proves control calls (control_auth); None: no control call is accepted
        self.curve = curve
        self.server_keys = server_keys if server_keys is not None else ServerKeys.new()  # the actor's own
        self.boot_id = os.urandom(8).hex()
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.machine_id = shared_memory.machine_id()
        self.started_at = time.time()
        self.store = CallStore(limits or StoreLimits())
        self.store.release_files = lambda names: self._on_loop(lambda: shared_memory.unlink(names))
        self.context = context or zmq.Context.instance()
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
        self._lanes: dict[str, ThreadLane] = {}
        self._loop_work: LoopWork | None = None  # what lane threads hand to the loop
        self._async_slots: dict[str, asyncio.Semaphore] = {}
        self._group_loops: dict[str, GroupLoop] = {}  # where each group's async methods run
        self._sweeper: asyncio.Task[None] | None = None
        self.hooks: list[Callable[[str, str, float], None]] = []  # (method, outcome, seconds) observers
        self.metrics_port: int | None = None  # where /metrics is served, if it is
        self.restarts = 0  # how often the spawner restarted this actor before this incarnation
        self._runner = CallRunner(self)
        self._constructing = False  # __construct__ accepted: no second one, nor a __prepare__, is
        self.leaving: str | None = None  # why the process leaves: from then on every call gets ActorDied
        self.exit_code = 0  # the process's exit code once it has stopped (runtime.actor_exit)
        self._leave_lock = threading.Lock()
        self._stopping = False
        self._stopper: asyncio.Future[None] | None = None
        self._farewells: list[CallRecord] = []  # calls answered with ActorDied as the process leaves

    # ---- lifecycle -------------------------------------------------------------------------------------------

    async def start(self, *, serves_actor: bool = True) -> str:
        """Bind and start serving; returns the bound address. ``serves_actor=False``: the process is no actor (a
        driver serving its object refs), so ``exit_actor()`` stays refused there."""
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
        self._lanes["__construct__"] = ThreadLane("construct", 1, self._finish)
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
        """Install the constructed instance and its lanes (called by ``__construct__``).

        ``max_concurrency`` (as Ray's): for an actor without async methods (a threaded actor), the default group's
        thread count, so that many default-lane calls run in parallel; for an async actor, how many of its
        default-group coroutines run at once (1000 when not given)."""
        # The default lane's idle thread reads the socket itself, so a call for it runs with no hand-off (in
        # an actor whose default-group methods are all async, that would only add one).
        lane_reads = any(
            not m.is_async and not m.options.control_plane and m.options.concurrency_group == DEFAULT_GROUP
            for m in info.methods.values()
        )
        threaded = max_concurrency is not None and not info.has_async_methods
        for group, threads in info.concurrency_groups.items():
            if threaded and group == DEFAULT_GROUP:
                threads = max_concurrency
            idle_receive = self._receive_while_idle if group == DEFAULT_GROUP and lane_reads else None
            self._lanes[group] = ThreadLane(group, threads, self._finish, idle_receive=idle_receive)
            slots = (max_concurrency or DEFAULT_ASYNC_CONCURRENCY) if group == "default" else threads
            self._async_slots[group] = asyncio.Semaphore(slots)
            if info.has_async_methods:  # any group may run an async method (options(concurrency_group=...))
                self._group_loops[group] = GroupLoop(group, name)
        self.name, self.instance = name, instance
        self.info = info  # last: calls are routed once this is set

    def leave(self, code: int, cause: str) -> str:
        """Leave the process with exit ``code`` because of ``cause`` (runtime.actor_exit): every call in flight
        or queued is answered with ActorDied at once, later ones are refused the same way, and the process stops
        once those answers are acknowledged (at most ``_LEAVE_GRACE_S`` later). Any thread; the first call
        decides the code. Returns what callers are told."""
        if self._begin_leaving(code, f"actor {self.name!r} exits with code {code}: {cause}"):
            log.warning("%s", self.leaving)
            self._answer_in_flight()
            self._on_loop(self._stop_soon)
        return self.leaving

    def _begin_leaving(self, code: int, reason: str) -> bool:
        with self._leave_lock:
            if self.leaving is not None:
                return False
            self.exit_code, self.leaving = code, f"{reason}; calls in flight did not finish"
        # New SUBMITs get ActorDied from now on; an instance attribute, so the common path pays nothing.
        self._handlers = {**ActorServer._handlers, Kind.SUBMIT: ActorServer._on_submit_while_leaving}
        for lane in list(self._lanes.values()):
            lane.discard_queued()  # answered below: they must not run
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
        if self._stopping:
            return
        self._stopping = True
        self._begin_leaving(0, f"actor {self.name!r} is shutting down (shutdown call, a signal, or its parent left)")
        if self._sweeper is not None:
            self._sweeper.cancel()
        for group_loop in self._group_loops.values():  # their calls are answered: what they return is not sent
            group_loop.cancel_all()
        deadline = time.monotonic() + _LEAVE_GRACE_S
        while True:
            self._answer_in_flight()  # also a call accepted while this process began to leave
            records = self.store.records
            if not any(records.get(r.call_id) is r for r in self._farewells) or time.monotonic() >= deadline:
                break
            await asyncio.sleep(_LEAVE_CHECK_S)
        for lane in self._lanes.values():
            lane.stop()
        for group_loop in self._group_loops.values():
            group_loop.stop()
        if self.endpoint is not None:
            self.endpoint.close()
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
        """Handle one message, on the loop or on an idle lane thread (the endpoint runs one at a time)."""
        peer = frames[0].bytes
        try:
            message = wire.unpack(frames[1:], max_header_bytes=DEFAULT_MAX_HEADER_BYTES)
            handler = self._handlers[message.kind]
            handler(self, peer, message)
        except (FrameError, KeyError) as exc:
            self.endpoint.stats.drop("malformed")
            log.debug("%s: dropped a malformed message: %s", self.name, exc)
        except BadHeader as exc:
            self.endpoint.stats.drop(exc.reason)
            log.debug("%s: dropped a %s: %s", self.name, exc.reason, exc)

    def _send(self, peer: bytes, frames: list[Buffer]) -> None:
        self.endpoint.send([peer, *frames])

    def _on_ping(self, peer: bytes, message: wire.Message) -> None:
        nonce = header_checks.ping_nonce(message.meta)
        stats = {"constructed": self.instance is not None, "calls": len(self.store.records)}
        self._send(peer, wire.pack(Kind.PONG, [nonce, self.boot_id, stats]))

    def _on_ack(self, peer: bytes, message: wire.Message) -> None:
        self._ack(peer, header_checks.ids_only(message.meta))

    def _ack(self, peer: bytes, call_ids: list[bytes]) -> None:
        now = time.monotonic()
        for call_id in call_ids:
            self.store.ack(call_id, peer, now)

    def _on_poll(self, peer: bytes, message: wire.Message) -> None:
        for call_id in header_checks.ids_only(message.meta):
            self._answer_known(peer, call_id, self.store.lookup(call_id))

    def _answer_known(self, peer: bytes, call_id: bytes, known: CallRecord | Tombstone | None) -> None:
        """Tell ``peer`` what became of a call it asked about; only the caller that submitted it gets its result
        (its routing id is stable across reconnects), any other learns nothing of it."""
        if isinstance(known, CallRecord):
            if known.peer != peer:
                state = "unknown"
            elif known.state is CallState.DONE:
                self._send(peer, known.result)
                return
            else:
                state = "running"
        else:
            state = known.value if known is not None else "unknown"
        self._send(peer, wire.pack(Kind.STATUS, [call_id, state, self.boot_id]))

    def _on_submit(self, peer: bytes, message: wire.Message) -> None:
        head = SubmitHeader.parse(message.meta)
        call_id = head.call_id
        if head.acks:
            self._ack(peer, head.acks)
        if head.expected_boot is not None and head.expected_boot != self.boot_id:
            self._reject(
                peer,
                call_id,
                "restarted",
                f"the call was meant for incarnation {head.expected_boot} but this process is {self.boot_id}; "
                "the actor restarted, so the call was not run",
            )
            return
        body = message.body if message.body is not None else b""
        fingerprint = request_fingerprint(head.method, body, message.buffers)
        known = self.store.lookup(call_id)
        if known is not None:
            self.stats["duplicates_total"] += 1
            if isinstance(known, CallRecord) and (known.fingerprint != fingerprint or known.peer != peer):
                problem = "call id reused for a different request or by another caller; use a fresh call id"
                self._reject(peer, call_id, "rejected", problem)
                return
            self._answer_known(peer, call_id, known)
            return
        problem = self.store.id_problem(call_id, time.time())  # after lookup: see id_problem
        if problem is not None:
            self.stats["stale_ids_total"] += 1
            self._reject(peer, call_id, "rejected", f"actor {self.name!r} refused {head.method!r}: {problem}")
            return
        if head.method in control_auth.CONTROL_METHODS:
            problem = self._control_problem(head, fingerprint)
            if problem is not None:
                self.stats["unauthorized_total"] += 1
                level = logging.WARNING if self.stats["unauthorized_total"] <= _LOGGED_REFUSALS else logging.DEBUG
                log.log(level, "%s: refused %s from peer %s: %s", self.name, head.method, peer.hex(), problem)
                self._reject(peer, call_id, "rejected", problem)
                return
        record = CallRecord(call_id, fingerprint, head.method, peer, shm_ok=head.shm_ok)
        self._accept(record, head.deadline, body, message.buffers)

    def _control_problem(self, head: SubmitHeader, fingerprint: bytes) -> str | None:
        """Why a control call (construct, shutdown) may not run, or None."""
        if not control_auth.verify(self._spawn_token, head.proof, head.call_id, head.method, fingerprint):
            return (
                f"{head.method} is a control call: only the process that spawned this actor may make it "
                "(its request carries a proof made with the worker's spawn token)"
            )
        if head.method != "__shutdown__" and (self.instance is not None or self._constructing):
            return f"actor {self.name!r} is already constructed; spawn a new process for another actor"
        return None

    def _on_submit_while_leaving(self, peer: bytes, message: wire.Message) -> None:
        head = SubmitHeader.parse(message.meta)
        if head.acks:
            self._ack(peer, head.acks)
        known = self.store.lookup(head.call_id)
        if known is not None:  # a resend: it gets the answer its call got
            self._answer_known(peer, head.call_id, known)
        else:
            self._reject(peer, head.call_id, "exited", self.leaving)

    _handlers = {Kind.SUBMIT: _on_submit, Kind.POLL: _on_poll, Kind.ACK: _on_ack, Kind.PING: _on_ping}

    # ---- running ---------------------------------------------------------------------------------------------

    def _accept(self, record: CallRecord, deadline: float | None, body: Buffer, buffers: list[Buffer]) -> None:
        peer, call_id, method_name = record.peer, record.call_id, record.method
        builtin = builtin_methods.BUILTINS.get(method_name)
        info: MethodInfo | None = None
        if builtin is None:
            if self.info is None:
                self._reject(peer, call_id, "rejected", f"actor is not constructed yet; cannot run {method_name!r}")
                return
            try:
                info = self.info.method(method_name, actor=self.name)
            except CallRejected as exc:
                self._reject(peer, call_id, "rejected", str(exc))
                return
        incoming = memoryview(body).nbytes
        if buffers:
            incoming += sum(memoryview(b).nbytes for b in buffers)
        control = builtin is not None or info.options.control_plane
        problem = self.store.capacity_problem(incoming, peer, control=control)
        if problem is not None:
            self._reject(peer, call_id, "over_capacity", f"actor {self.name!r} refused {method_name!r}: {problem}")
            return
        self.store.add(record, incoming)
        if method_name == "__construct__":  # accepted: no other construct or prepare is from now on
            self._constructing = True
        self.stats["calls_total"] += 1

        def run() -> tuple[CallRecord, list[Buffer]]:
            return record, self._runner.run(record, info, builtin, deadline, body, buffers)

        if builtin is not None and builtin.threaded:
            self._lanes["__construct__"].submit(run)
        elif control:
            self._on_loop(lambda: self._finish(run()))
        elif info.is_async:
            group = info.options.concurrency_group
            slots = self._async_slots[group]

            async def run_async() -> None:
                record.task = asyncio.current_task()  # what a cancel (runtime.builtin_methods) cancels
                frames = await self._runner.run_async(record, info, deadline, body, buffers, slots)
                self._finish((record, frames))

            self._group_loops[group].start(run_async)
        else:
            self._lanes[info.options.concurrency_group].submit(run)

    def _reject(self, peer: bytes, call_id: bytes, code: str, message: str) -> None:
        self.stats["rejected_total"] += 1
        self._send(peer, error_frames(call_id, self.boot_id, code, message))

    def _finish(self, done: tuple[CallRecord, list[Buffer]]) -> None:
        """Record a call's result and send it; runs on the loop or on the lane thread that ran the call."""
        record, frames = done
        if record.refused:  # refused before it ran: the id is not used up, a corrected resend may run
            self.store.forget(record)
            self._send(record.peer, frames)
        elif self.store.finish(record, frames, time.monotonic()):
            self._send(record.peer, frames)  # else forgotten meanwhile (e.g. expired): nobody to answer

    def in_flight(self) -> dict[str, int]:
        """Calls running or queued, per lane."""
        lanes = {name: lane.busy + lane.queued for name, lane in self._lanes.items() if name != "__construct__"}
        lanes["async"] = self._async_running()
        return lanes

    def _async_running(self) -> int:
        return sum(len(group_loop.tasks) for group_loop in self._group_loops.values())

    def cancel(self, record: CallRecord) -> str:
        """Cancel an accepted call (its caller asked, :meth:`PendingCall.cancel`): a queued one never runs, a
        running async one gets CancelledError in its coroutine; a running sync one cannot be stopped. Returns
        what was done."""
        record.cancelled = True  # seen by the call's runner before the method starts (runtime.call_runner)
        task = record.task
        if task is None:
            return "cancelled before it started"
        group_loop = next((g for g in self._group_loops.values() if g.loop is task.get_loop()), None)
        if group_loop is not None:
            group_loop.cancel(task)
        return "cancelled while running"

    def lane_load(self) -> dict[str, tuple[int, int]]:
        """(running, queued) per lane; async tasks count as running. Safe to call from any thread."""
        lanes = {name: (lane.busy, lane.queued) for name, lane in list(self._lanes.items()) if name != "__construct__"}
        lanes["async"] = (self._async_running(), 0)
        return lanes
