"""The client side of one actor: a DEALER socket multiplexing many calls, with liveness and recovery.

A lost SUBMIT is resent (the server dedupes by call id); when the actor dies or restarts, calls fail instead of hanging.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import zmq

from runtime.caller.acks import AckBatch
from runtime.caller.call import Call, deadline_passed, not_delivered, set_exception, set_result
from runtime.caller.connection_state import MOVES, ConnectionState
from runtime.caller.incarnations import GoneIncarnations, lost_in_flight, pinned_to_gone, refused_reply
from runtime.caller.link_liveness import POLL_AFTER_S, LinkLiveness
from runtime.caller.wait_spin import wait_here
from runtime.core.call_ids import new_call_id
from runtime.core.errors import ActorDied, ActorRestarted, CallSite
from runtime.core.loop_work import LoopWork
from runtime.core.outcome import decode_result
from transport import frames as wire
from transport import shared_memory
from transport.codec import DecodeError
from transport.endpoints import ZmqEndpoint
from transport.frames import FrameError
from transport.link_watch import LinkChange
from transport.messages import Ack, Pong, Result, Status, Submit
from transport.protocol import DEFAULT_MAX_HEADER_BYTES, Kind
from transport.security import CurveConfig, CurveKeyError
from transport.sockets import dealer

log = logging.getLogger(__name__)

DEFAULT_LIVENESS_TIMEOUT_S = 10.0
_CLOSE_DEAD_AFTER_S = 2.0  # a dead actor's socket closes this long after (a driver outlives thousands of actors)
_IDLE, _OPEN, _RESTARTING, _DEAD = (ConnectionState.IDLE, ConnectionState.OPEN, ConnectionState.RESTARTING,
                                   ConnectionState.DEAD)  # fmt: skip
_parse_result = Result.parse


class Connection:
    """All calls from this process to one actor endpoint. ``submit`` and ``wait`` run on any thread.

    ``context`` opens the socket; ``loop_work`` runs on the loop what belongs there (calls waiting for the socket,
    deadline timers, freeing shared memory) and says whether the calling thread is the loop's.

    Once the socket is open, the calling thread sends its SUBMIT itself (the endpoint's send is thread-safe).
    Replies are read by the loop, or by a thread blocked in :meth:`wait`, which takes them off the socket itself;
    timers, heartbeats and restarts stay on the loop. One lock guards the calls table and the state
    (runtime.caller.connection_state: where a new call goes), so a call never slips past a restart or a death,
    and calls from one thread leave in the order they were made.
    """

    def __init__(
        self,
        context: zmq.Context,
        loop_work: LoopWork,
        endpoint: str,
        *,
        actor: str,
        host: str,
        boot_id: str | None,
        machine_id: str = "",
        liveness_timeout_s: float = DEFAULT_LIVENESS_TIMEOUT_S,
        curve: CurveConfig | None = None,
        server_key: bytes | None = None,
    ) -> None:
        if curve is not None and server_key is None:
            raise CurveKeyError(
                f"actor {actor!r} at {endpoint}: CURVE is on but the actor's public key is unknown; a handle from "
                "spawn/attach, get_actor or another handle carries it (connect() takes it as server_key=)"
            )
        self._context = context
        self._loop_work = loop_work
        self._run_soon = loop_work.run_soon  # bound once: both are on the call path
        self._on_loop_thread = loop_work.on_loop_thread
        self.curve = curve
        self.server_key = server_key
        self.same_machine = shared_memory.shared_with(machine_id)
        self.address = endpoint
        self.actor = actor
        self.host = host
        self.boot_id = boot_id
        self.liveness_timeout_s = liveness_timeout_s
        self.calls: dict[bytes, Call] = {}
        self._state = _IDLE
        self.dead: str | None = None  # why the actor is gone, once the state is DEAD
        self._held: dict[bytes, Call] = {}  # calls waiting while the actor restarts
        self._gone = GoneIncarnations()
        self._socket: ZmqEndpoint | None = None
        acks = AckBatch(on_loop_thread=self._on_loop_thread, send_alone=self._send_acks)
        self._take_acks, self._ack, self.flush_acks = acks.take, acks.add, acks.flush  # bound once: the call path
        self._heartbeat: asyncio.Task[None] | None = None
        self._last_heard = time.monotonic()
        self._last_result_at = 0.0  # when a RESULT last came: a waiting thread spins only right after one
        self._lock = threading.RLock()
        self._backlog: collections.deque[Call] = collections.deque()  # calls waiting for the loop to send them
        self._unarmed: list[Call] = []  # sent from other threads; their deadline timers are set on the loop
        self.exit_watched = False  # a process watcher of ours reports the actor's exit: link loss is left to it
        self._link = LinkLiveness(endpoint, self)

    def _move(self, to: ConnectionState) -> None:
        """Move to state ``to`` (lock held); a move the table (runtime.caller.connection_state) lacks is a bug."""
        if to not in MOVES[self._state]:
            raise RuntimeError(f"connection to {self.actor} at {self.address}: no move from {self._state} to {to}")
        self._state = to

    @property
    def transport_address(self) -> str | None:
        """Where the socket is connected: ``address``, or the actor's same-host twin; None before the first call."""
        return self._socket.address if self._socket is not None else None

    @property
    def socket_closed(self) -> bool:  # none was opened, or it was closed
        return self._socket is None or self._socket.closed

    def site(self, method: str) -> CallSite:
        return CallSite(self.actor, method, self.host)

    def _ensure_open(self) -> ZmqEndpoint:
        if self._socket is None:
            self._socket = dealer(
                self._context, self.address, self._on_frames, routing_id=os.urandom(12), curve=self.curve,
                server_key=self.server_key, on_link=self._on_link,
                on_handshake_failure=lambda why: self.mark_dead(f"cannot talk to {self.address}: {why}"),
                peer_known_up=self.boot_id is not None,  # a constructed incarnation: it was listening
            )  # fmt: skip
            self._socket.start()
            self._heartbeat = asyncio.get_running_loop().create_task(self._link.heartbeat(self._socket))
            self._move(_OPEN)
        return self._socket

    # ---- sending ---------------------------------------------------------------------------------------------

    def submit(self, call: Call) -> None:
        """Send ``call`` from any thread: at once when the socket is open, else through the loop. A call its handle
        pinned to an incarnation (``Call.boot_id``) is refused with ActorRestarted, unsent, once that one is known
        gone (runtime.caller.incarnations); an unpinned call goes to the incarnation that answers now."""
        wake: Callable[[], None] | None = None
        with self._lock:
            if call.boot_id in self._gone:  # pinned to an incarnation known to be gone (None never is)
                self._settle_with(call, pinned_to_gone(call, self.boot_id, self.site(call.method)))
            elif self._backlog or self._state is not _OPEN:
                self._backlog.append(call)  # behind earlier calls that wait for the loop: order is kept
                if len(self._backlog) == 1:
                    wake = self._send_backlog
            else:
                self._send_submit(call)
                if call.deadline is not None:
                    if self._on_loop_thread():
                        call.arm_deadline(self._expire)
                    else:  # timers belong to the loop
                        self._unarmed.append(call)
                        if len(self._unarmed) == 1:
                            wake = self._arm_unarmed
        if wake is not None:
            self._run_soon(wake)

    def _send_backlog(self) -> None:
        with self._lock:
            while self._backlog:
                self._submit_on_loop(self._backlog.popleft())

    def _arm_unarmed(self) -> None:
        with self._lock:
            calls, self._unarmed = self._unarmed, []
            for call in calls:
                if not call.future.done():
                    call.arm_deadline(self._expire)

    def _submit_on_loop(self, call: Call) -> None:
        if call.boot_id in self._gone:  # its incarnation went while it waited (for the loop, or a restart)
            self._settle_with(call, pinned_to_gone(call, self.boot_id, self.site(call.method)))
            return
        if self._state is _DEAD:
            self._settle_with(call, ActorDied(self.dead, site=self.site(call.method)))
            return
        if self._state is _RESTARTING:
            self._held[call.call_id] = call
            call.arm_deadline(self._expire)
            return
        self._ensure_open()
        self._send_submit(call)
        call.arm_deadline(self._expire)

    def _send_submit(self, call: Call) -> None:
        if not self.calls:
            self._last_heard = time.monotonic()  # silence while idle says nothing about liveness
        self.calls[call.call_id] = call
        if call.boot_id is None:  # not pinned by its handle: pinned to the current incarnation, where known
            call.boot_id = self.boot_id
        call.frames = Submit(
            call.call_id, call.method, call.deadline, call.boot_id, call.proof, self._take_acks(), self.same_machine
        ).pack(call.payload)
        call.sent_at = call.polled_at = time.monotonic()
        self._socket.send(call.frames)

    def _settle_with(self, call: Call, error: Exception) -> None:
        call.settle(self._run_soon)
        set_exception(call.future, error)

    def withdraw(self, call: Call) -> bool:
        """Take back ``call`` if it has not been sent yet (waiting for the socket or for a restart); whether it was."""
        with self._lock:
            if call in self._backlog:
                self._backlog.remove(call)
            elif self._held.get(call.call_id) is call:
                del self._held[call.call_id]
            else:
                return False
        call.settle(self._run_soon)
        return True

    def _expire(self, call: Call) -> None:
        with self._lock:
            held = self._held.pop(call.call_id, None)
            mine = self.calls.pop(call.call_id, None) is call or held is call
        if mine:
            self._settle_with(call, deadline_passed(self.site(call.method)))

    def _send_acks(self, ids: list[bytes]) -> None:
        if self._socket is not None and not self._socket.closed:
            self._socket.send(Ack(ids).pack())

    # ---- receiving -------------------------------------------------------------------------------------------

    def wait(self, call: Call, timeout_s: float | None) -> None:
        """Block this (non-loop) thread until ``call`` is settled or ``timeout_s`` passes, reading replies here."""
        socket = self._socket
        if socket is not None and not call.future.done():
            wait_here(socket, call.future, timeout_s, self._last_result_at)

    def _on_frames(self, frames: list[Any]) -> None:
        self._last_heard = time.monotonic()
        try:
            message = wire.unpack(frames, max_header_bytes=DEFAULT_MAX_HEADER_BYTES)
            if message.kind is Kind.RESULT:
                self._on_result(message)
            elif message.kind is Kind.STATUS:
                self._on_status(message)
            elif message.kind is Kind.PONG:
                pong = Pong.parse(message.meta)
                self._link.pong(pong.nonce)
                self._check_boot(pong.boot_id)
        except (FrameError, DecodeError, ValueError, TypeError, IndexError) as exc:
            log.warning("dropped a malformed reply from %s at %s: %s", self.actor, self.address, exc)

    def _on_result(self, message: wire.Message) -> None:
        self._last_result_at = self._last_heard
        call_id, ok, boot_id = _parse_result(message.meta)
        with self._lock:
            call = self.calls.pop(call_id, None)
        self._ack(call_id)  # also for results we no longer wait for: lets the server free them
        if call is None:
            return
        call.settle(self._run_soon)
        if call.boot_id is not None and boot_id != call.boot_id:  # another incarnation: never taken as the result
            good, value = False, refused_reply(call, boot_id, self.site(call.method))
        else:
            try:
                site = partial(self.site, call.method)
                good, value = decode_result(ok, message.body, message.buffers, site, call_id)
            except Exception as exc:  # e.g. a type this process has not registered
                good, value = False, exc
        self._check_boot(boot_id)
        if good:
            set_result(call.future, value)
        else:
            set_exception(call.future, value)
        if not good and isinstance(value, ActorDied):  # the actor is leaving and waits for this acknowledgement
            self._run_soon(self.flush_acks)

    def _on_status(self, message: wire.Message) -> None:
        """The answer to a POLL of a silent call (it kept its SUBMIT frames): "running" (the server will push the
        result), "unknown" (the SUBMIT was lost: resent), or "acked"/"expired" (its result is gone)."""
        call_id, state, boot_id = Status.parse(message.meta)
        self._check_boot(boot_id)
        with self._lock:
            call = self.calls.get(call_id)
            if call is None:
                return
            if state == "unknown":  # the SUBMIT never arrived: resending is safe (dedupe by id)
                self._socket.send(call.frames)
                return
            if state not in ("acked", "expired"):
                return
            del self.calls[call_id]
        self._settle_with(call, not_delivered(state, self.site(call.method)))

    def _check_boot(self, boot_id: str) -> None:
        """Replies carry the server's boot id: a new one means the actor restarted, and the calls in flight (but
        those pinned to the new one) fail with ActorRestarted instead of hanging."""
        if boot_id == self.boot_id:  # the common case, decided without the lock
            return
        with self._lock:
            if self.boot_id is None or boot_id == self.boot_id:
                self.boot_id = boot_id
                return
            old, self.boot_id = self.boot_id, boot_id
            self._gone.add(old)
            self._fail_all(ActorRestarted, lost_in_flight(old, boot_id), spare=boot_id)

    # ---- liveness (runtime.caller.link_liveness) --------------------------------------------------------------------
    # Heartbeats and the socket monitor tell a dead actor; a process watcher (when we spawned it) reports an exit at
    # once.

    def silent_for(self, now: float) -> float | None:
        """How long the actor has said nothing while calls are pending; None while none are."""
        return now - self._last_heard if self.calls else None

    def due_for_poll(self, now: float) -> list[bytes]:
        """The ids of the calls silent for ``POLL_AFTER_S``, marked as polled at ``now``."""
        with self._lock:
            quiet = [c for c in self.calls.values() if now - c.polled_at > POLL_AFTER_S]
            for call in quiet:
                call.polled_at = now
        return [call.call_id for call in quiet]

    def mark_dead(self, reason: str) -> None:
        """The actor is gone: fail every call in flight and every later call with ActorDied."""
        with self._lock:
            if self._state is _DEAD:
                return
            self._move(_DEAD)
            self.dead = reason
            held, self._held = self._held, {}
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        self._fail_all(ActorDied, reason)
        self._fail(list(held.values()), ActorDied, reason)
        if self._socket is not None:  # closed soon: the acknowledgements an exiting actor waits for leave first
            self._loop_work.run_later(_CLOSE_DEAD_AFTER_S, self.close)

    def _on_link(self, change: LinkChange, reason: str) -> None:
        """The socket monitor's word on the link (on the loop), judged by :mod:`runtime.caller.link_liveness`."""
        socket = self._socket
        if socket is None or socket.closed or self._state is _DEAD:
            return
        self._link.changed(socket, change, reason)

    def link_left_alone(self) -> bool:
        """Link loss is not ours to judge: the actor is dead already, a process watcher of ours reports its exit
        (with its code), or a restart is under way."""
        return self._state is _DEAD or self.exit_watched or self._state is _RESTARTING

    def _fail_all(self, error: type[Exception], reason: str, spare: str | None = None) -> None:
        """Fail every call in flight but those pinned to incarnation ``spare`` (the one that answers)."""
        with self._lock:
            lost = [call for call in self.calls.values() if spare is None or call.boot_id != spare]
            for call in lost:
                del self.calls[call.call_id]
        self._fail(lost, error, reason)

    def _fail(self, calls: list[Call], error: type[Exception], reason: str) -> None:
        for call in calls:
            self._settle_with(call, error(reason, site=self.site(call.method)))

    # ---- restarts (driven by runtime.processes.supervisor) ---------------------------------------------------

    def hold(self, reason: str) -> None:
        """The actor's process exited and is being restarted: calls in flight fail with ActorRestarted
        (``reason``); later calls wait for :meth:`release` (or their deadline)."""
        with self._lock:
            if self._state is _DEAD:
                return
            if self._state is not _RESTARTING:
                self._move(_RESTARTING)
            self._gone.add(self.boot_id)
        self._fail_all(ActorRestarted, reason)

    def release(self, boot_id: str) -> None:
        """The new incarnation ``boot_id`` is up: send the calls that waited for it."""
        with self._lock:
            held, self._held = self._held, {}
            if self._state is _DEAD:
                return
            if self._state is _RESTARTING:
                self._move(_OPEN if self._socket is not None else _IDLE)
            self.boot_id = boot_id
            self._last_heard = time.monotonic()
            for call in held.values():
                if call.proof is None:  # never sent: a fresh id, so a long restart does not make it stale
                    call.call_id = new_call_id()
                self._submit_on_loop(call)

    def close(self) -> None:
        self.mark_dead("the connection was closed by this process")
        self._link.close()
        if self._socket is not None:
            self._socket.close()
