"""Actor handles: ``handle.method(*args, **kwargs)`` returns a PendingCall you can ``await`` or ``.result()``.

Handles are sendable and survive pickle: the copy calls the same actor directly, from any process.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol

from runtime.caller.argument_errors import UNSENDABLE, argument_error
from runtime.caller.call import Call
from runtime.caller.call_policy import CallPolicy
from runtime.caller.client import ClientRuntime
from runtime.caller.connection import DEFAULT_LIVENESS_TIMEOUT_S, Connection
from runtime.caller.incarnations import current_incarnation
from runtime.caller.pending_call import PendingCall
from runtime.caller.stream_call import DEFAULT_WINDOW, StreamingCall
from runtime.core import control_auth
from runtime.core.call_ids import new_call_id
from runtime.core.errors import CallRejected
from runtime.core.metadata import GROUP_SEPARATOR, ActorClassInfo
from runtime.core.outcome import arguments_bind
from runtime.core.stream_hints import STREAM_MARK
from transport import security, shared_memory
from transport.codec import encode, encode_shared
from transport.messages import request_fingerprint
from transport.security import FROM_ENV, CurveDir
from transport.type_registry import register_type


class MethodRef:
    """A bound remote method; call it to start a call."""

    __slots__ = ("_deadline_s", "_handle", "_name", "_site", "_wire_name")

    def __init__(
        self, handle: ActorHandle, name: str, deadline_s: float | None, concurrency_group: str | None = None
    ) -> None:
        self._handle = handle
        self._name = name
        self._deadline_s = deadline_s
        # Resolved here, once: a call pays nothing for options it does not use.
        self._wire_name = name if concurrency_group is None else f"{name}{GROUP_SEPARATOR}{concurrency_group}"
        group = "" if concurrency_group is None else f" in concurrency group {concurrency_group!r}"
        self._site = f"actor {handle.actor_name!r} method {name!r}{group}"

    def options(
        self,
        *,
        deadline_s: float | None = None,
        concurrency_group: str | None = None,
        stream: bool | None = None,
        window: int = DEFAULT_WINDOW,
    ) -> MethodRef:
        """The same method with a deadline (seconds from the call) after which it fails with DeadlineExceeded, and/or
        run in ``concurrency_group`` (one the actor declares) instead of the one its ``@method`` names.
        A generator method streams (its call is a :class:`StreamingCall`): ``stream=True`` says so where the handle
        does not know the class; ``window``: items the actor may produce ahead of the caller (backpressure)."""
        if concurrency_group is not None and (not isinstance(concurrency_group, str) or not concurrency_group):
            raise ValueError(f"{self._site}: concurrency_group must be a non-empty str, got {concurrency_group!r}")
        if type(window) is not int or not 1 <= window <= 1024:
            raise ValueError(f"{self._site}: window must be an int in 1..1024 (items ahead), got {window!r}")
        return _method_ref(self._handle, self._name, deadline_s, concurrency_group, stream, window)

    def __call__(self, *args: Any, **kwargs: Any) -> PendingCall:
        return self._handle._submit(self._wire_name, args, kwargs, self._deadline_s, self._site)


class StreamMethodRef(MethodRef):
    """A bound generator method: a call streams its items (:mod:`runtime.caller.stream_call`)."""

    __slots__ = ("_window",)

    def __init__(
        self, handle: ActorHandle, name: str, deadline_s: float | None, group: str | None, window: int
    ) -> None:
        super().__init__(handle, name, deadline_s, group)
        self._wire_name += STREAM_MARK
        self._window = window

    def __call__(self, *args: Any, **kwargs: Any) -> StreamingCall:  # type: ignore[override]
        producer = self._handle._submit(self._wire_name, args, kwargs, self._deadline_s, self._site)
        handle = self._handle
        return StreamingCall(
            producer, handle.method("__stream_next__"), handle.method("__stream_close__"), self._window, self._site
        )


def _method_ref(
    handle: ActorHandle, name: str, deadline_s: float | None, group: str | None = None, stream: bool | None = None,
    window: int = DEFAULT_WINDOW,
) -> MethodRef:  # fmt: skip
    """The method ``name`` of ``handle``: a stream when it is a generator method (or ``stream=True``)."""
    if stream is None:
        info = handle.info.methods.get(name) if handle.info is not None else None
        stream = info is not None and info.streams
    return (
        StreamMethodRef(handle, name, deadline_s, group, window)
        if stream
        else MethodRef(handle, name, deadline_s, group)
    )


class ActorOwner(Protocol):
    """What stops an actor this process started, given to its handle when the handle is made: the restart policy of
    a spawned actor (runtime.processes.supervisor.Supervisor) or a placed actor's process (runtime.placement)."""

    restarts_actor: bool  # it brings the actor back after a crash: the handle follows restarts

    @property
    def process(self) -> Any:
        """The process that runs the actor now (exit code, pid, recent output)."""

    def stop(self) -> None:
        """Kill the actor for good."""

    def kill_for_restart(self) -> None:
        """Kill the actor's process as a crash would (only where ``restarts_actor``)."""


class ActorHandle:
    """A reference to one actor, pinned to the incarnation ``boot_id`` unless it follows restarts (the handle from
    ``spawn``; see :attr:`follows_restarts`).

    An actor restarted under ``max_restarts`` is a new process (a new ``boot_id``) at the same endpoint. The handle
    ``spawn`` returned follows restarts (calls made during one wait for the new incarnation). Every other handle
    (sent, pickled, from ``get_actor`` or ``connect``) is pinned: once its incarnation is gone its calls fail with
    ``ActorRestarted`` and never run, on the old one nor the new one, until its holder calls :meth:`follow_restart`
    (state built up in the old incarnation is gone; only the holder knows whether its calls still make sense).

    ``curve_dir``: the CURVE client keys to call it with (default ``MILES_CURVE_DIR``; None: plain TCP).
    ``server_key``: the actor's own CURVE public key (z85), which it must prove in the handshake.
    ``metrics_port``: where the actor process serves Prometheus ``/metrics`` (None if unknown or off).
    ``policy``: a deadline per call and the error a call that did not get through raises (a service's handle:
    :mod:`runtime.caller.call_policy`); it stays with this handle (a copy sent or pickled has none).
    ``owner``: what stops the actor, when this process started it (:class:`ActorOwner`); it never leaves this process.
    """

    def __init__(
        self,
        *,
        endpoint: str,
        name: str,
        class_path: str,
        boot_id: str | None,
        host: str,
        pid: int,
        machine_id: str = "",
        info: ActorClassInfo | None = None,
        liveness_timeout_s: float = DEFAULT_LIVENESS_TIMEOUT_S,
        runtime: ClientRuntime | None = None,
        metrics_port: int | None = None,
        curve_dir: CurveDir = FROM_ENV,
        connection: Connection | None = None,
        spawn_token: bytes | None = None,
        server_key: str | None = None,
        policy: CallPolicy | None = None,
        owner: ActorOwner | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.actor_name = name
        self.class_path = class_path
        self.boot_id = boot_id
        self.host = host
        self.pid = pid
        self.machine_id = machine_id
        self.info = info
        self.liveness_timeout_s = liveness_timeout_s
        self.metrics_port = metrics_port
        self.spawn_token = spawn_token  # proves control calls (construct, shutdown); only the spawner has it
        self.server_key = server_key  # the actor's own CURVE public key (z85): only it can answer as this actor
        self._owner = owner
        self._runtime = runtime or ClientRuntime.get()
        self._curve_dir = curve_dir
        self._connection = connection  # opened on first use: a handle that is only passed along costs nothing
        self._follows = False  # set through follows_restarts
        self.policy = policy
        self._killed: list[Callable[[ActorHandle], None]] = []  # when_killed callbacks

    @property
    def _conn(self) -> Connection:
        if self._connection is None:
            self._connection = self._runtime.connection(
                self.endpoint,
                actor=self.actor_name,
                host=self.host,
                boot_id=self.boot_id,
                machine_id=self.machine_id,
                liveness_timeout_s=self.liveness_timeout_s,
                curve=security.resolve(self._curve_dir),
                server_key=self.server_key.encode() if self.server_key else None,
            )
        return self._connection

    def __repr__(self) -> str:
        return f"ActorHandle({self.actor_name!r}, {self.class_path}, {self.endpoint}, host={self.host}, pid={self.pid})"

    def __getattr__(self, name: str) -> MethodRef:
        if name.startswith("_"):
            raise AttributeError(name)
        ref = self.__dict__[name] = _method_ref(self, name, None)  # found without __getattr__ from now on
        return ref

    def method(self, name: str) -> MethodRef:
        """The method ``name`` (also built-ins such as ``__health__``, or names shadowed by handle attributes)."""
        return _method_ref(self, name, None) if not name.startswith("__") else MethodRef(self, name, None)

    @property
    def connection(self) -> Connection:
        return self._conn

    @property
    def owner(self) -> ActorOwner | None:
        """What stops the actor, where this process started it (spawn's handle); None for any other handle."""
        return self._owner

    @property
    def process(self) -> Any:
        """The process that runs the actor now, where this process started it; else None."""
        return self._owner.process if self._owner is not None else None

    def when_killed(self, callback: Callable[[ActorHandle], None]) -> None:
        """Call ``callback(handle)`` once :meth:`kill` has stopped the actor (naming forgets its names then)."""
        if callback not in self._killed:
            self._killed.append(callback)

    def now_at(self, record: dict[str, Any], *, spawn_token: bytes | None) -> None:
        """Point this handle at a new incarnation of its actor (``__construct__``'s or ``__health__``'s record):
        its owner's restart, or :meth:`follow_restart`."""
        self.boot_id, self.pid, self.host = record["boot_id"], record["pid"], record["host"]
        self.metrics_port = record.get("metrics_port")
        if spawn_token is not None:
            self.spawn_token = spawn_token

    @property
    def follows_restarts(self) -> bool:
        """Whether calls go to whichever incarnation answers, not only to ``boot_id``: the handle ``spawn`` returned
        (its supervisor restarts the actor), a handle that names no incarnation yet, or one set so
        (``runtime.ray_compat`` sets it: Ray's handles follow restarts)."""
        restarts = self._owner is not None and self._owner.restarts_actor
        return self._follows or restarts or self.boot_id is None

    @follows_restarts.setter
    def follows_restarts(self, follows: bool) -> None:
        self._follows = follows

    def follow_restart(self, *, deadline_s: float = 10.0) -> ActorHandle:
        """Pin this handle to the incarnation of its actor that serves at its endpoint now (after a restart, the
        new one; waiting up to ``deadline_s`` for it to be constructed) and return it: its calls then run there.
        ``ActorDied`` when another actor answers there, ``DeadlineExceeded`` when none was constructed there in
        time (the actor is gone, or still restarting). A handle that follows restarts is returned as it is."""
        return self._runtime.run(
            self.follow_restart_async(deadline_s=deadline_s), timeout_s=deadline_s + 5, what=f"{self!r}.follow_restart"
        )

    async def follow_restart_async(self, *, deadline_s: float = 10.0) -> ActorHandle:
        """:meth:`follow_restart` for async code."""
        if self.follows_restarts:
            return self
        probe = ActorHandle(**{**self.to_state(), "boot_id": None}, runtime=self._runtime, curve_dir=self._curve_dir)
        ask = probe.method("__health__")
        health = await current_incarnation(
            lambda left: ask.options(deadline_s=left)(), self.actor_name, self.endpoint, self.server_key, deadline_s
        )
        self.now_at(health, spawn_token=None)
        self._connection = None  # the live one from now on (a new one where this one saw the old incarnation die)
        return self

    @property
    def dead(self) -> str | None:
        """Why the actor is known to be dead, or None."""
        return self._conn.dead

    def _submit(
        self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], deadline_s: float | None, site: str
    ) -> PendingCall:
        # Arguments are checked against the method's type hints and encoded on the caller's thread, before anything
        # reaches the wire: a bad call raises at once (CallRejected, or TypeError for an argument that cannot be sent).
        if self.info is not None and not method.startswith("__"):
            self.info.method(method, actor=self.actor_name).bind(args, kwargs, actor=self.actor_name)
        conn = self._conn
        shared: list[str] = []
        call_id = new_call_id()
        try:
            if conn.same_machine:
                payload, shared = encode_shared([list(args), kwargs], bind=arguments_bind(call_id))
            else:
                payload = encode([list(args), kwargs], bind=arguments_bind(call_id))
        except UNSENDABLE as exc:
            raise argument_error(self.actor_name, method, args, kwargs, exc, self._parameter_names(method)) from None
        policy = self.policy
        if deadline_s is None and policy is not None:
            deadline_s = policy.deadline_s(method, kwargs)
        deadline = time.time() + deadline_s if deadline_s is not None else None
        proof = None
        if method in control_auth.CONTROL_METHODS:
            proof = self._control_proof(call_id, method, payload, shared)
        pin = None if self.follows_restarts else self.boot_id  # a pinned call is refused by any other incarnation
        call = Call(call_id, method, payload, deadline, proof, shared, boot_id=pin)
        conn.submit(call)
        unavailable = None
        if policy is not None:
            unavailable = functools.partial(policy.unavailable, method)
        return PendingCall(call, conn, self._runtime, site, unavailable)

    def _parameter_names(self, method: str) -> tuple[str, ...]:
        """The names of ``method``'s parameters after ``self``, where the class is known here."""
        info = self.info.methods.get(method) if self.info is not None else None
        params = list(info.signature.parameters.values())[1:] if info is not None else []
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return tuple(p.name for p in itertools.takewhile(lambda p: p.kind in positional, params))

    def _control_proof(self, call_id: bytes, method: str, payload: tuple[bytes, list[Any]], shared: list[str]) -> bytes:
        if self.spawn_token is None:
            shared_memory.unlink(shared)
            raise CallRejected(
                f"actor {self.actor_name!r}: {method} is a control call that only the process which spawned the "
                "actor can make (it holds the worker's spawn token); ask the owner, or use the handle it returned"
            )
        body, buffers = payload
        return control_auth.proof(self.spawn_token, call_id, method, request_fingerprint(method, body, buffers))

    def process_health(self) -> PendingCall:
        """The actor process's health record (answered on the control lane, even during a long sync method)."""
        return self.method("__health__")()

    def mark_dead(self, reason: str) -> None:
        """Tell the runtime this actor's process is gone (e.g. a launcher saw it exit)."""
        self._runtime.call_soon(self._conn.mark_dead, reason)

    def kill(self, *, no_restart: bool = True) -> None:
        """Stop the actor now: SIGKILL if this process spawned it, else ask it to shut down (only the spawner or
        attacher holds the token that allows it: ``CallRejected`` otherwise).

        ``no_restart=False`` (as Ray's ``ray.kill``): kill the process and let the restart policy
        (``max_restarts``) bring it back; this handle keeps working. Only for a handle from ``spawn``.
        """
        owner = self._owner
        if not no_restart:
            if owner is None or not owner.restarts_actor:
                raise ValueError(
                    f"actor {self.actor_name!r}: kill(no_restart=False) needs the handle spawn() returned, whose "
                    "process restarts the actor; this handle has no restart policy"
                )
            owner.kill_for_restart()
            return
        if owner is not None:
            owner.stop()
        elif self._conn.dead is None:
            if self.spawn_token is None:
                raise CallRejected(
                    f"actor {self.actor_name!r} can be killed only by the process that spawned or attached it "
                    "(this handle came from elsewhere and holds no spawn token)"
                )
            try:
                self.method("__shutdown__")().result(timeout=5.0)
            except Exception:  # already gone, unreachable: either way it is dead to us
                pass
        for callback in self._killed:
            callback(self)
        self.mark_dead(f"actor {self.actor_name!r} was killed by its owner")

    def to_state(self) -> dict[str, Any]:
        """What identifies this handle (endpoint, name, class, boot id, host, pid, ...), JSON-safe:
        ``ActorHandle(**state)`` rebuilds it in another process."""
        return {
            "endpoint": self.endpoint,
            "name": self.actor_name,
            "class_path": self.class_path,
            "boot_id": self.boot_id,
            "host": self.host,
            "pid": self.pid,
            "machine_id": self.machine_id,
            "metrics_port": self.metrics_port,
            "server_key": self.server_key,
        }

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Pickled as its identity only (pickle and cloudpickle, e.g. inside a config object): the copy calls the same
        actor from any process, never with this one's spawn token (a pickle may end up anywhere, so the copy cannot
        kill the actor, as a handle from ``get_actor`` cannot), nor its owner (which must not leave here)."""
        return _handle_from_state, (self.to_state(),)


_STATE_FIELDS = {
    "endpoint": (str,),
    "name": (str,),
    "class_path": (str,),
    "boot_id": (str, type(None)),
    "host": (str,),
    "pid": (int,),
    "machine_id": (str,),
    "metrics_port": (int, type(None)),
    "server_key": (str, type(None)),
}
_MAX_STATE_TEXT = 1024


def _handle_from_state(state: dict[str, Any]) -> ActorHandle:
    """A handle from :meth:`ActorHandle.to_state` as it came off the wire: exactly those fields, checked."""
    if type(state) is not dict or set(state) - _STATE_FIELDS.keys() or "endpoint" not in state:
        raise ValueError(f"an actor handle's state has exactly the fields {sorted(_STATE_FIELDS)}")
    for key, value in state.items():
        if type(value) not in _STATE_FIELDS[key] or (type(value) is str and len(value) > _MAX_STATE_TEXT):
            raise ValueError(f"an actor handle's field {key!r} is a {type(value).__name__} it cannot be")
    if not state["endpoint"].startswith(("tcp://", "ipc://")):
        raise ValueError(f"an actor handle's endpoint must be tcp:// or ipc://, got {state['endpoint'][:80]!r}")
    return ActorHandle(**state)


register_type(ActorHandle, to_state=ActorHandle.to_state, from_state=_handle_from_state)

__all__ = ["ActorHandle", "CallRejected", "MethodRef", "PendingCall", "StreamMethodRef"]
