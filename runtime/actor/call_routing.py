"""Call routing: SUBMIT -> dedupe -> admission -> a lane; POLL and ACK; recording and sending each result.

A resend of a known call is answered from the call store with what became of it: a call never runs twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from runtime.actor import admission, builtin_methods
from runtime.actor.call_runner import CallRunner
from runtime.actor.call_store import CallRecord, CallState, CallStore, Tombstone
from runtime.actor.server_lanes import ServerLanes
from runtime.actor.server_phase import PhaseMachine, ServerPhase
from runtime.actor.stream_runner import StreamRunner
from runtime.core import control_auth
from runtime.core.errors import CallRejected
from runtime.core.metadata import ActorClassInfo, MethodInfo
from runtime.core.outcome import error_frames
from transport import frames as wire
from transport.codec import Buffer
from transport.messages import Ack, Poll, Status, Submit, request_fingerprint

log = logging.getLogger(__name__)

_LOGGED_REFUSALS = 20  # refused control calls logged as warnings; the rest only counted (no log flood)

Send = Callable[[bytes, list[Buffer]], None]


class CallRouter:
    """Routes the calls of one server. ``send(peer, frames)`` answers a caller; ``on_loop(fn)`` runs ``fn`` on
    the server's loop; ``stats`` is the server's counters (shared with it)."""

    def __init__(
        self,
        *,
        store: CallStore,
        lanes: ServerLanes,
        runner: CallRunner,
        phase: PhaseMachine,
        send: Send,
        on_loop: Callable[[Callable[[], Any]], None],
        stats: dict[str, int],
        boot_id: str,
        spawn_token: bytes | None,
        actor: str,
    ) -> None:
        self._store = store
        self._threads = lanes.threads
        self._async_slots = lanes.async_slots
        self._group_loops = lanes.group_loops
        self._runner = runner
        self._phase = phase
        self._send = send
        self._on_loop = on_loop
        self._stats = stats
        self._boot_id = boot_id
        self._spawn_token = spawn_token  # proves control calls (control_auth); None: no control call is accepted
        self._actor = actor  # the actor's name, in refusals
        self._info: ActorClassInfo | None = None  # the methods routed; None: not constructed yet
        self._streams = StreamRunner(runner, lanes, self.finish)  # generator methods' calls

    def serve(self, info: ActorClassInfo, actor: str) -> None:
        """Route calls to the methods of ``info`` from now on (the actor ``actor`` is constructed)."""
        self._actor = actor
        self._info = info  # last: calls are routed once this is set

    # ---- POLL, ACK -------------------------------------------------------------------------------------------
    # POLL asks what became of calls; ACK lets the store drop a result (a tombstone remains).

    def on_ack(self, peer: bytes, message: wire.Message) -> None:
        self._ack(peer, Ack.parse(message.meta).call_ids)

    def _ack(self, peer: bytes, call_ids: list[bytes]) -> None:
        now = time.monotonic()
        for call_id in call_ids:
            self._store.ack(call_id, peer, now)

    def on_poll(self, peer: bytes, message: wire.Message) -> None:
        for call_id in Poll.parse(message.meta).call_ids:
            self._answer_known(peer, call_id, self._store.lookup(call_id))

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
        self._send(peer, Status(call_id, state, self._boot_id).pack())

    # ---- SUBMIT ----------------------------------------------------------------------------------------------

    def on_submit(self, peer: bytes, message: wire.Message) -> None:
        """Admit a new call and route it, or answer a resend with what became of it (its result, or its state).

        Checks, in order: the incarnation (a call for an earlier boot of a restarted actor is refused ``restarted``
        and was not run); a known call id (a resend, answered from the store); the id (one the store may have
        forgotten is refused: CallStore.id_problem); a control call's proof of the spawn token and the phase (one
        construct only); then, in :meth:`_accept`, the method (the actor must be constructed and have it) and the
        budgets (:func:`runtime.actor.admission.capacity_problem`).
        """
        head = Submit.parse(message.meta)
        call_id = head.call_id
        if head.acks:
            self._ack(peer, head.acks)
        if head.expected_boot is not None and head.expected_boot != self._boot_id:
            self._reject(peer, call_id, "restarted", admission.restarted(head.expected_boot, self._boot_id))
            return
        body = message.body if message.body is not None else b""
        fingerprint = request_fingerprint(head.method, body, message.buffers)
        known = self._store.lookup(call_id)
        if known is not None:
            self._stats["duplicates_total"] += 1
            if isinstance(known, CallRecord) and (known.fingerprint != fingerprint or known.peer != peer):
                problem = "call id reused for a different request or by another caller; use a fresh call id"
                self._reject(peer, call_id, "rejected", problem)
                return
            self._answer_known(peer, call_id, known)
            return
        problem = self._store.id_problem(call_id, time.time())  # after lookup: see id_problem
        if problem is not None:
            self._stats["stale_ids_total"] += 1
            self._reject(peer, call_id, "rejected", f"actor {self._actor!r} refused {head.method!r}: {problem}")
            return
        if head.method in control_auth.CONTROL_METHODS:
            problem = admission.control_problem(self._spawn_token, head, fingerprint, self._actor, self._phase.now)
            if problem is not None:
                self._stats["unauthorized_total"] += 1
                level = logging.WARNING if self._stats["unauthorized_total"] <= _LOGGED_REFUSALS else logging.DEBUG
                log.log(level, "%s: refused %s from peer %s: %s", self._actor, head.method, peer.hex(), problem)
                self._reject(peer, call_id, "rejected", problem)
                return
        record = CallRecord(call_id, fingerprint, head.method, peer, shm_ok=head.shm_ok)
        self._accept(record, head.deadline, body, message.buffers)

    def on_submit_while_leaving(self, peer: bytes, message: wire.Message, reason: str) -> None:
        """A SUBMIT to a leaving process: a resend gets the answer its call got, a new call ActorDied (``reason``
        says why)."""
        head = Submit.parse(message.meta)
        if head.acks:
            self._ack(peer, head.acks)
        known = self._store.lookup(head.call_id)
        if known is not None:
            self._answer_known(peer, head.call_id, known)
        else:
            self._reject(peer, head.call_id, "exited", reason)

    def _accept(self, record: CallRecord, deadline: float | None, body: Buffer, buffers: list[Buffer]) -> None:
        """Record a call that passes the last checks and send it where its method runs: sync methods to their
        group's thread lane, async methods as tasks on their group's own loop, built-in and control-plane methods
        on the server's loop (the control lane), the constructor on a lane of its own (runtime.actor.server_lanes).
        """
        peer, call_id, method_name = record.peer, record.call_id, record.method
        builtin = builtin_methods.BUILTINS.get(method_name)
        info: MethodInfo | None = None
        if builtin is None:
            if self._info is None:
                self._reject(peer, call_id, "rejected", f"actor is not constructed yet; cannot run {method_name!r}")
                return
            try:
                info = self._info.method(method_name, actor=self._actor)
            except CallRejected as exc:
                self._reject(peer, call_id, "rejected", str(exc))
                return
        incoming = memoryview(body).nbytes
        if buffers:
            incoming += sum(memoryview(b).nbytes for b in buffers)
        control = builtin is not None or info.options.control_plane
        problem = admission.capacity_problem(self._store, incoming, peer, control=control)
        if problem is not None:
            self._reject(peer, call_id, "over_capacity", f"actor {self._actor!r} refused {method_name!r}: {problem}")
            return
        self._store.add(record, incoming)
        if method_name == "__construct__":  # accepted: no other construct or prepare is from now on
            self._phase.move(ServerPhase.CONSTRUCTING)
        self._stats["calls_total"] += 1

        def run() -> tuple[CallRecord, list[Buffer]]:
            return record, self._runner.run(record, info, builtin, deadline, body, buffers)

        if builtin is not None:
            if builtin.lane is not None:
                self._threads[builtin.lane].submit(run)
            elif builtin.is_async:
                self._on_loop(
                    lambda: asyncio.ensure_future(self._run_builtin_async(record, builtin, deadline, body, buffers))
                )
            else:
                self._on_loop(lambda: self.finish(run()))
        elif info.streams:
            self._streams.start(record, info, deadline, body, buffers)
        elif control and not info.is_async:
            self._on_loop(lambda: self.finish(run()))
        elif info.is_async:
            slots = None if control else self._async_slots[info.options.concurrency_group]

            async def run_async() -> None:
                record.task = asyncio.current_task()  # what a cancel (runtime.actor.builtin_methods) cancels
                frames = await self._runner.run_async(record, info, deadline, body, buffers, slots)
                self.finish((record, frames))

            if control:  # an async control-plane method: a task on the server's loop, bounded by no group's slots
                self._on_loop(lambda: asyncio.ensure_future(run_async()))
            else:
                self._group_loops[info.options.concurrency_group].start(run_async)
        else:
            self._threads[info.options.concurrency_group].submit(run)

    async def _run_builtin_async(
        self, record: CallRecord, builtin: builtin_methods.Builtin, deadline: float | None, body: Buffer,
        buffers: list[Buffer],
    ) -> None:  # fmt: skip
        self.finish((record, await self._runner.run_builtin_async(record, builtin, deadline, body, buffers)))

    def _reject(self, peer: bytes, call_id: bytes, code: str, message: str) -> None:
        self._stats["rejected_total"] += 1
        self._send(peer, error_frames(call_id, self._boot_id, code, message))

    def finish(self, done: tuple[CallRecord, list[Buffer]]) -> None:
        """Record a call's result (the RESULT frames the call runner made of its outcome) and send it; runs on the
        loop or on the lane thread that ran the call."""
        record, frames = done
        if record.refused:  # refused before it ran: the id is not used up, a corrected resend may run
            self._store.forget(record)
            self._send(record.peer, frames)
        elif self._store.finish(record, frames, time.monotonic()):
            self._send(record.peer, frames)  # else forgotten meanwhile (e.g. expired): nobody to answer
