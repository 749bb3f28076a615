"""The client side of one actor: a DEALER socket multiplexing many calls, with liveness and recovery.

Every call keeps its SUBMIT frames until its result arrives. Calls that stay silent are POLLed; the server
answers with the result, "running" (it will push the result), or "unknown" (the SUBMIT was lost: it is resent,
which is safe because the server dedupes by call id). PINGs while calls are pending detect an unreachable
actor; a process watcher (when we spawned it) reports an exit at once. Replies carry the server's boot id: a
new one means the actor restarted, and the calls in flight fail with ActorRestarted instead of hanging. While a
spawner restarts the actor (``hold``), new calls wait for the new incarnation (``release``) or their deadline.

A call may be submitted from any thread. Once the socket is open, the calling thread packs and sends its
SUBMIT itself (the endpoint's send is thread-safe). Replies are read by the loop, or by a thread blocked on a
result (``wait``), which takes them off the socket itself; timers, heartbeats and restarts stay on the loop.
One lock guards the calls table and the state that decides where a call goes, so a call never slips past a
restart or a death, and calls from one thread leave in the order they were made.

A death is seen at once by every holder, not only the spawner: the socket monitor (read on the loop, off the call
path) reports a dropped link, a probe PING goes out, and when the reconnects are refused, a connect of our own is
refused too and the probe got no answer, the actor's process is gone (:mod:`transport.link_watch`). A busy actor
keeps its link and its control lane answers PINGs, so it is never taken for dead. Where a process watcher of ours
reports the exit with its code (``exit_watched``: the spawner, its supervisor), the link is left to it.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from runtime import header_checks
from runtime.call_ids import new_call_id
from runtime.errors import ActorDied, ActorRestarted, CallSite, DeadlineExceeded, NotDelivered
from runtime.outcome import decode_result
from transport import frames as wire
from transport import shared_memory
from transport.codec import Buffer, DecodeError
from transport.endpoints import ZmqEndpoint
from transport.frames import FrameError
from transport.link_watch import LinkChange, nothing_listens
from transport.protocol import DEFAULT_MAX_HEADER_BYTES, Kind
from transport.security import CurveConfig, CurveKeyError
from transport.sockets import dealer
from transport.waker import Waker

if TYPE_CHECKING:
    from runtime.client import ClientRuntime

log = logging.getLogger(__name__)

PING_INTERVAL_S = 0.5
POLL_AFTER_S = 1.0
DEFAULT_LIVENESS_TIMEOUT_S = 10.0
ACK_DELAY_S = 0.02
_WAIT_SLICE_S = 1.0  # a waiting thread looks again at least this often, whatever woke it or not


def _wait_spin_s() -> float:
    """``MILES_WAIT_SPIN_US``: how long a thread blocked on a result polls the socket before it sleeps."""
    text = os.environ.get("MILES_WAIT_SPIN_US", "200")
    try:
        micros = float(text)
    except ValueError:
        micros = -1.0
    if not 0 <= micros <= 1e6:
        raise ValueError(f"MILES_WAIT_SPIN_US must be microseconds between 0 (never spin) and 1000000, got {text!r}")
    return micros / 1e6


WAIT_SPIN_S = _wait_spin_s()
#: A waiting thread spins only if the actor answered this recently: an actor silent for longer has gone to sleep
#: and takes longer to wake than the spin lasts, and on a small machine the spinning core is one its threads need.
SPIN_AFTER_RESULT_S = 0.0003


@dataclass(slots=True, eq=False)
class Call:
    """One call in flight from this process."""

    call_id: bytes
    method: str
    payload: tuple[bytes, list[Buffer]]
    deadline: float | None  # unix seconds
    proof: bytes | None  # a control call's proof (runtime.control_auth), else None
    shared: list[str] = field(default_factory=list)  # shared-memory files holding arguments
    future: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)
    frames: list[Buffer] | None = None
    sent_at: float = 0.0
    polled_at: float = 0.0
    timer: asyncio.TimerHandle | None = None
    boot_id: str | None = None  # the incarnation the SUBMIT was pinned to: only its reply is the result


class Connection:
    """All calls from this process to one actor endpoint. ``submit`` and ``wait`` run on any thread."""

    def __init__(
        self,
        runtime: ClientRuntime,
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
        self.runtime = runtime
        self.curve = curve
        self.server_key = server_key
        self.same_machine = self.shares_memory(machine_id)
        self.address = endpoint
        self.actor = actor
        self.host = host
        self.boot_id = boot_id
        self.liveness_timeout_s = liveness_timeout_s
        self.calls: dict[bytes, Call] = {}
        self.dead: str | None = None
        self._held: dict[bytes, Call] | None = None  # calls waiting while the actor restarts
        self._socket: ZmqEndpoint | None = None
        self._acks: list[bytes] = []
        self._heartbeat: asyncio.Task[None] | None = None
        self._last_heard = time.monotonic()
        self._last_result_at = 0.0  # when a RESULT last came: a waiting thread spins only right after one
        self._lock = threading.RLock()
        self._backlog: collections.deque[Call] = collections.deque()  # calls waiting for the loop to send them
        self._unarmed: list[Call] = []  # sent from other threads; their deadline timers are set on the loop
        self.exit_watched = False  # a process watcher of ours reports the actor's exit: link loss is left to it
        self._probes = 0
        self._probe: str | None = None  # the nonce of the PING sent when the link last dropped
        self._probe_answered = False
        self._link_down = False
        self._confirming: asyncio.Task[None] | None = None  # is the listener really gone? (see _on_link)

    @staticmethod
    def shares_memory(machine_id: str) -> bool:
        """Whether an actor on ``machine_id`` can read our /dev/shm."""
        return bool(machine_id) and machine_id == shared_memory.machine_id() and shared_memory.available()

    @property
    def transport_address(self) -> str | None:
        """Where the socket is connected: ``address``, or the actor's same-host twin; None before the first call."""
        return self._socket.address if self._socket is not None else None

    def site(self, method: str) -> CallSite:
        return CallSite(self.actor, method, self.host)

    def _ensure_open(self) -> ZmqEndpoint:
        if self._socket is None:
            self._socket = dealer(
                self.runtime.context,
                self.address,
                self._on_frames,
                routing_id=os.urandom(12),
                curve=self.curve,
                server_key=self.server_key,
                on_handshake_failure=self._refused,
                on_link=self._on_link,
                peer_known_up=self.boot_id is not None,  # a constructed incarnation: it was listening
            )
            self._socket.start()
            self._heartbeat = asyncio.get_running_loop().create_task(self._heartbeat_forever())
        return self._socket

    # ---- sending ---------------------------------------------------------------------------------------------

    def submit(self, call: Call) -> None:
        """Send ``call`` from any thread: at once when the socket is open, else through the loop."""
        wake: Callable[[], None] | None = None
        with self._lock:
            if self._backlog or self._socket is None or self._held is not None or self.dead is not None:
                self._backlog.append(call)  # behind earlier calls that wait for the loop: order is kept
                if len(self._backlog) == 1:
                    wake = self._send_backlog
            else:
                self._send_submit(call)
                if call.deadline is not None:
                    if self.runtime.on_loop_thread():
                        self._arm_deadline(call)
                    else:  # timers belong to the loop
                        self._unarmed.append(call)
                        if len(self._unarmed) == 1:
                            wake = self._arm_unarmed
        if wake is not None:
            self.runtime.call_soon(wake)

    def _send_backlog(self) -> None:
        with self._lock:
            while self._backlog:
                self._submit_on_loop(self._backlog.popleft())

    def _arm_unarmed(self) -> None:
        with self._lock:
            calls, self._unarmed = self._unarmed, []
            for call in calls:
                if not call.future.done():
                    self._arm_deadline(call)

    def _submit_on_loop(self, call: Call) -> None:
        if self.dead is not None:
            self._settle(call)
            _set_exception(call.future, ActorDied(self.dead, site=self.site(call.method)))
            return
        if self._held is not None:
            self._held[call.call_id] = call
            self._arm_deadline(call)
            return
        self._ensure_open()
        self._send_submit(call)
        self._arm_deadline(call)

    def _send_submit(self, call: Call) -> None:
        if not self.calls:
            self._last_heard = time.monotonic()  # silence while idle says nothing about liveness
        self.calls[call.call_id] = call
        call.boot_id = self.boot_id
        meta = [
            call.call_id,
            call.method,
            call.deadline,
            call.boot_id,
            call.proof,
            self._take_acks(),
            self.same_machine,
        ]
        call.frames = wire.pack(Kind.SUBMIT, meta, call.payload)
        call.sent_at = call.polled_at = time.monotonic()
        self._socket.send(call.frames)

    def withdraw(self, call: Call) -> bool:
        """Take back ``call`` if it has not been sent yet (waiting for the socket or for a restart); whether it was."""
        with self._lock:
            if call in self._backlog:
                self._backlog.remove(call)
            elif self._held is not None and self._held.get(call.call_id) is call:
                del self._held[call.call_id]
            else:
                return False
        self._settle(call)
        return True

    def _arm_deadline(self, call: Call) -> None:
        if call.deadline is not None and call.timer is None:
            loop = asyncio.get_running_loop()
            call.timer = loop.call_at(loop.time() + call.deadline - time.time(), self._expire, call)

    def _settle(self, call: Call) -> None:
        """The call is over for us: stop its timer, drop the shared-memory files holding its arguments."""
        if call.timer is not None:
            self.runtime.call_soon(call.timer.cancel)  # timers belong to the loop
        if call.shared:  # freeing a large file takes milliseconds: not on the waiting caller's time
            self.runtime.call_soon(shared_memory.unlink, call.shared)

    def _expire(self, call: Call) -> None:
        with self._lock:
            held = self._held.pop(call.call_id, None) if self._held is not None else None
            mine = self.calls.pop(call.call_id, None) is call or held is call
        if mine:
            self._settle(call)
            _set_exception(
                call.future,
                DeadlineExceeded(
                    "the deadline passed with no result; the call may still run on the actor",
                    site=self.site(call.method),
                ),
            )

    def _take_acks(self) -> list[bytes]:
        """Acknowledgements ride on the next SUBMIT; a timer sends them alone when no SUBMIT comes soon."""
        with self._lock:
            acks, self._acks = self._acks, []
        return acks

    def _flush_acks(self) -> None:
        acks = self._take_acks()
        if acks and self._socket is not None and not self._socket.closed:
            self._socket.send(wire.pack(Kind.ACK, [acks]))

    def _ack(self, call_id: bytes) -> None:
        with self._lock:
            if not self._acks and self.runtime.on_loop_thread():
                asyncio.get_running_loop().call_later(ACK_DELAY_S, self._flush_acks)
            self._acks.append(call_id)  # taken by another thread: the next SUBMIT or heartbeat carries it

    # ---- receiving -------------------------------------------------------------------------------------------

    def wait(self, call: Call, timeout_s: float | None) -> None:
        """Block this (non-loop) thread until ``call`` is settled or ``timeout_s`` passes, reading replies off
        the socket here: the reply then wakes this thread directly, not the loop thread and then this one."""
        socket = self._socket
        if socket is None or call.future.done():
            return
        waker = Waker.for_this_thread()
        call.future.add_done_callback(waker.wake)  # settled by another thread (the loop, a death, a timer)
        now = time.monotonic()
        until = None if timeout_s is None else now + timeout_s
        spin_s = WAIT_SPIN_S if now - self._last_result_at < SPIN_AFTER_RESULT_S else 0.0
        while not call.future.done() and not socket.closed:
            slice_s = _WAIT_SLICE_S if until is None else min(_WAIT_SLICE_S, until - time.monotonic())
            if slice_s <= 0:
                return
            socket.receive_here(slice_s, waker, spin_s=spin_s)

    def _on_frames(self, frames: list[Any]) -> None:
        self._last_heard = time.monotonic()
        try:
            message = wire.unpack(frames, max_header_bytes=DEFAULT_MAX_HEADER_BYTES)
            if message.kind is Kind.RESULT:
                self._on_result(message)
            elif message.kind is Kind.STATUS:
                self._on_status(message)
            elif message.kind is Kind.PONG and len(message.meta) == 3 and type(message.meta[1]) is str:
                if message.meta[0] == self._probe:
                    self._probe_answered = True  # it answered after the link dropped: alive
                self._check_boot(message.meta[1])
        except (FrameError, DecodeError, ValueError, TypeError, IndexError) as exc:
            log.warning("dropped a malformed reply from %s at %s: %s", self.actor, self.address, exc)

    def _on_result(self, message: wire.Message) -> None:
        self._last_result_at = self._last_heard
        call_id, ok, boot_id = header_checks.reply(message.meta, bool)
        with self._lock:
            call = self.calls.pop(call_id, None)
        self._ack(call_id)  # also for results we no longer wait for: lets the server free them
        if call is None:
            return
        self._settle(call)
        if call.boot_id is not None and boot_id != call.boot_id:  # another incarnation: never taken as the result
            good, value = (
                False,
                ActorRestarted(
                    f"the reply came from incarnation {boot_id}, but the call was sent to incarnation {call.boot_id}: "
                    "the actor restarted, so its reply was refused",
                    site=self.site(call.method),
                ),
            )
        else:
            try:
                good, value = decode_result(ok, message.body, message.buffers, partial(self.site, call.method))
            except Exception as exc:  # e.g. a type this process has not registered
                good, value = False, exc
        self._check_boot(boot_id)
        if good:
            _set_result(call.future, value)
        else:
            _set_exception(call.future, value)
        if not good and isinstance(value, ActorDied):  # the actor is leaving and waits for this acknowledgement
            self.runtime.call_soon(self._flush_acks)

    def _on_status(self, message: wire.Message) -> None:
        call_id, state, boot_id = header_checks.reply(message.meta, str)
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
        self._settle(call)
        _set_exception(
            call.future,
            NotDelivered(
                f"the actor reports this call's result as {state} before this caller received it "
                "(result_ttl_s too short, or the call id was reused)",
                site=self.site(call.method),
            ),
        )

    def _check_boot(self, boot_id: str) -> None:
        if boot_id == self.boot_id:  # the common case, decided without the lock
            return
        with self._lock:
            if self.boot_id is None or boot_id == self.boot_id:
                self.boot_id = boot_id
                return
            old, self.boot_id = self.boot_id, boot_id
            self._fail_all(
                ActorRestarted, f"the actor restarted (boot id {old} → {boot_id}); calls in flight were lost"
            )

    # ---- liveness --------------------------------------------------------------------------------------------

    async def _heartbeat_forever(self) -> None:
        nonce = 0
        while self.dead is None:
            await asyncio.sleep(PING_INTERVAL_S)
            self._flush_acks()
            if not self.calls:
                continue
            now = time.monotonic()
            if now - self._last_heard > self.liveness_timeout_s:
                self.mark_dead(
                    f"no answer from {self.address} for {now - self._last_heard:.1f}s "
                    f"(liveness_timeout_s={self.liveness_timeout_s})"
                )
                return
            nonce += 1
            self._socket.send(wire.pack(Kind.PING, [nonce]))
            with self._lock:
                quiet = [c for c in self.calls.values() if now - c.polled_at > POLL_AFTER_S]
                for call in quiet:
                    call.polled_at = now
            if quiet:
                self._socket.send(wire.pack(Kind.POLL, [[call.call_id for call in quiet]]))

    def mark_dead(self, reason: str) -> None:
        """The actor is gone: fail every call in flight and every later call with ActorDied."""
        with self._lock:
            if self.dead is not None:
                return
            self.dead = reason
            held, self._held = self._held, None
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        self._fail_all(ActorDied, reason)
        self._fail(list((held or {}).values()), ActorDied, reason)

    def _refused(self, reason: str) -> None:
        self.mark_dead(f"cannot talk to {self.address}: {reason}")

    def _on_link(self, change: LinkChange, reason: str) -> None:
        """The socket monitor's word on the link (on the loop). A drop sends a probe; a peer whose listener is
        gone is confirmed gone (:meth:`_confirm_gone`), unless a process watcher of ours reports it."""
        socket = self._socket
        if socket is None or socket.closed or self.dead is not None:
            return
        self._link_down = change is not LinkChange.BACK
        if change is LinkChange.LOST:
            self._probes += 1
            self._probe, self._probe_answered = f"probe-{self._probes}", False
            socket.send(wire.pack(Kind.PING, [self._probe]))  # answered as soon as a reconnect lands
        elif change is LinkChange.GONE and not self._leave_link_alone() and self._confirming is None:
            self._confirming = asyncio.get_running_loop().create_task(self._confirm_gone(socket, reason))

    def _leave_link_alone(self) -> bool:
        """A process watcher of ours reports this actor's exit (with its code), or a restart is under way, or the
        actor answered the probe after the link dropped."""
        return self.exit_watched or self._held is not None or self._probe_answered

    async def _confirm_gone(self, socket: ZmqEndpoint, reason: str) -> None:
        """Failed reconnects do not say why; a connect of our own does: refused means nothing listens there."""
        try:
            refused = await nothing_listens(socket.address)
        finally:
            self._confirming = None
        if not refused or socket.closed or self.dead is not None or not self._link_down or self._leave_link_alone():
            return  # not proven: a link that stays silent is still caught by the liveness timeout
        self.mark_dead(f"the actor's process is gone ({self.address}): {reason}")
        socket.close()  # no more reconnects to an address nobody listens at

    def _fail_all(self, error: type[Exception], reason: str) -> None:
        with self._lock:
            calls, self.calls = self.calls, {}
        self._fail(list(calls.values()), error, reason)

    def _fail(self, calls: list[Call], error: type[Exception], reason: str) -> None:
        for call in calls:
            self._settle(call)
            _set_exception(call.future, error(reason, site=self.site(call.method)))

    # ---- restarts (driven by runtime.supervisor) -------------------------------------------------------------

    def hold(self, reason: str) -> None:
        """The actor's process exited and is being restarted: calls in flight fail with ActorRestarted
        (``reason``); later calls wait for :meth:`release` (or their deadline)."""
        with self._lock:
            if self.dead is not None:
                return
            if self._held is None:
                self._held = {}
        self._fail_all(ActorRestarted, reason)

    def release(self, boot_id: str) -> None:
        """The new incarnation ``boot_id`` is up: send the calls that waited for it."""
        with self._lock:
            held, self._held = self._held, None
            if self.dead is not None:
                return
            self.boot_id = boot_id
            self._last_heard = time.monotonic()
            for call in (held or {}).values():
                if call.proof is None:  # never sent: a fresh id, so a long restart does not make it stale
                    call.call_id = new_call_id()
                self._submit_on_loop(call)

    def close(self) -> None:
        self.mark_dead("the connection was closed by this process")
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self._confirming is not None:
            self._confirming.cancel()
        if self._socket is not None:
            self._socket.close()


def _set_result(future: concurrent.futures.Future[Any], value: Any) -> None:
    """Settle ``future`` unless its caller cancelled it (then nobody waits for it)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        future.set_result(value)


def _set_exception(future: concurrent.futures.Future[Any], error: BaseException) -> None:
    """Fail ``future`` unless its caller cancelled it (then nobody waits for it)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        future.set_exception(error)
