"""Ray-shaped actor handles: ``handle.m.remote(x)`` calls the actor, in the order the calls were made (Ray's
python/ray/actor.py: ActorHandle, ActorMethod, ``__ray_ready__``, ``__ray_terminate__``, actors ending with their
handles unless named or detached)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import inspect
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from runtime.caller.handle import ActorHandle as NativeHandle
from runtime.core.errors import ActorDied
from runtime.core.metadata import ActorClassInfo, class_info
from runtime.ray_compat import options as opts
from runtime.ray_compat import task_interrupt
from runtime.ray_compat.actor_classes import keyword_class, original_class
from runtime.ray_compat.calls import RetryingCall, arguments_ready, refs_for, resolve_args, retry_on
from runtime.ray_compat.exceptions import ActorDiedError, actor_died, as_ray_error
from runtime.ray_compat.refs import ObjectRef, ObjectRefGenerator, _done
from transport.type_registry import register_type

RAY_METHOD = "__ray_method_options__"
END_AFTER_CALLS_S = 3600.0  # an actor whose handles are gone is ended after its calls in flight, waiting this long


class Lease:
    """One actor as this process knows it: its construction, the calls in flight to it, the resources it holds.
    ``owner``: started here by ``.remote()``; the session and its placement group keep it (to end it at shutdown or
    removal), and its first handle ends it when collected (after the calls in flight), unless the actor is named or
    detached, or a handle to it left this process (another may hold it).

    A handle from ``Cls.remote()`` exists before its actor is constructed (Ray returns at once): its calls queue
    behind construction here, so constructors that wait for each other (``init_process_group`` among peers) do not
    deadlock."""

    def __init__(
        self, spawning: concurrent.futures.Future[NativeHandle], label: str, *, owner: bool, keep: bool = True
    ) -> None:
        self.spawning, self.label, self.owner, self.keep = spawning, label, owner, keep
        self.shared = self.ended = False
        self.id = os.urandom(8).hex()  # until the actor is constructed: then its name and boot id
        self.held: tuple[Any, dict[str, float], list[str]] | None = None
        self.pending: set[concurrent.futures.Future[Any]] = set()
        self.info: ActorClassInfo | None = None  # the class's metadata, given to the native handle
        self._lock = threading.Lock()

    def native(self) -> NativeHandle:
        """The constructed actor's handle (waiting for it); ActorDiedError naming the cause if construction failed."""
        try:
            inner = self.spawning.result()
            if inner.info is None:
                inner.info = self.info
            inner.follows_restarts = True  # as Ray's handles, wherever they were sent: never pinned to one incarnation
            return inner
        except KeyboardInterrupt:  # ray.cancel of the task waiting here (task_interrupt): not the actor's error
            raise
        except BaseException as exc:
            error = ActorDiedError(
                f"The actor {self.label} died because of an error raised in its creation task: {exc}"
            )
            error.__cause__ = as_ray_error(exc)
            raise error from exc

    def described(self, exc: BaseException) -> BaseException:
        """A call's failure as the caller sees it: the actor's death as Ray's ActorDiedError, with its ``actor_id``."""
        return actor_died(exc, self.actor_id()) if isinstance(exc, ActorDied) else exc

    def actor_id(self) -> str:
        with contextlib.suppress(BaseException):
            inner = self.spawning.result()
            self.id = f"{inner.actor_name}:{inner.boot_id or ''}"
        return self.id

    def state(self) -> str:
        """Ray's actor state name: PENDING_CREATION, ALIVE or DEAD."""
        if not self.spawning.done():
            return "PENDING_CREATION"
        if failed(self.spawning) or self.spawning.result().dead is not None:
            return "DEAD"
        return "ALIVE"

    def track(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self.pending.add(future)
        future.add_done_callback(self._settled)

    def _settled(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self.pending.discard(future)

    def in_flight(self) -> list[concurrent.futures.Future[Any]]:
        with self._lock:
            return list(self.pending)

    def end(self) -> None:
        """Kill the actor and give its resources back, without waiting for a constructor still running (the
        actor is killed once it is constructed); a no-op the second time."""
        with self._lock:
            held, self.held, ended, self.ended = self.held, None, self.ended, True
        if not ended:
            self.spawning.add_done_callback(_kill)
        if held is not None:
            ledger, amounts, gpu_ids = held
            ledger.release(amounts, gpu_ids)

    def collected(self) -> None:
        """Its first handle is gone: end the actor once its calls in flight are done (Ray's reference counting)."""
        if not self.owner or self.keep or self.shared:
            return

        def end_after_calls() -> None:
            concurrent.futures.wait(self.in_flight(), timeout=END_AFTER_CALLS_S)
            self.end()

        threading.Thread(target=end_after_calls, name=f"ray-compat-end-{self.label}", daemon=True).start()


def failed(future: concurrent.futures.Future[Any]) -> bool:
    return future.cancelled() or future.exception() is not None


def _kill(spawning: concurrent.futures.Future[NativeHandle]) -> None:
    if not failed(spawning):
        with contextlib.suppress(Exception):
            spawning.result().kill(no_restart=True)


class ActorHandle:
    """A Ray-shaped handle: ``handle.m.remote(...)``; passable to other actors and tasks."""

    def __init__(
        self,
        inner: NativeHandle | None,
        *,
        cls: type | None = None,
        max_task_retries: int = 0,
        lease: Lease | None = None,
    ) -> None:
        if lease is None:
            assert inner is not None
            lease = Lease(_done(inner), inner.actor_name, owner=False)
        self._lease = lease
        self._inner = inner
        self._cls = cls or (original_class(inner.class_path) if inner is not None else None)
        self._info: ActorClassInfo | None = inner.info if inner is not None else None
        if self._info is None and self._cls is not None:
            with contextlib.suppress(Exception):
                self._info = class_info(keyword_class(self._cls))
        lease.info = lease.info or self._info
        self._max_task_retries = max_task_retries
        self._order = threading.Lock()
        #: The last call made, until it is sent; first the construction (calls queue behind it).
        self._last_sent: concurrent.futures.Future[Any] | None = None if inner is not None else lease.spawning
        weakref.finalize(self, lease.collected).atexit = False  # at exit the session's shutdown ends them all

    @property
    def native(self) -> NativeHandle:
        """This runtime's own handle of the actor (waiting for its construction)."""
        if self._inner is None:
            self._inner = self._lease.native()
        return self._inner

    def __getattr__(self, name: str) -> Any:
        if name == "__ray_ready__":
            return _Builtin(self, self._ready)
        if name == "__ray_terminate__":
            return _Builtin(self, self._terminate)
        if name.startswith("__"):
            raise AttributeError(name)
        info = self._info
        if info is not None and name not in info.methods:
            raise AttributeError(f"'ActorHandle' object has no attribute '{name}' (actor {self._label()!r})")
        if info is None and name.startswith("_"):
            raise AttributeError(name)
        return ActorMethod(self, name, {})

    def __repr__(self) -> str:
        return f"Actor({self._label()}, {self._lease.id})"

    def __deepcopy__(self, memo: dict[int, Any]) -> ActorHandle:
        return self  # a handle names the actor; copies of a structure holding it call the same actor (as Ray's)

    def __copy__(self) -> ActorHandle:
        return self

    def _label(self) -> str:
        return self._inner.actor_name if self._inner is not None else self._lease.label

    @property
    def _actor_id(self) -> _ActorID:
        """The actor's id (``name:boot``, as ``get_runtime_context().get_actor_id()`` says in it): waits for its
        construction; an actor whose construction failed keeps the id its handle was made with."""
        return _ActorID(self._lease.actor_id())

    def _ready(self) -> concurrent.futures.Future[Any]:
        """``__ray_ready__``: True once the actor is constructed; its construction error otherwise."""
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def settle(_: Any) -> None:
            try:
                self.native  # noqa: B018 - waits for construction, raises its error
            except BaseException as exc:
                done.set_exception(exc)
            else:
                done.set_result(True)

        self._lease.spawning.add_done_callback(settle)
        return done

    def _terminate(self) -> concurrent.futures.Future[Any]:
        """``__ray_terminate__``: end the actor once the calls made before it through this handle have finished."""
        before = self._lease.in_flight()
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def end() -> None:
            concurrent.futures.wait(before)
            self._kill(True)
            done.set_result(None)

        threading.Thread(target=end, name="ray-compat-terminate", daemon=True).start()
        return done

    def _kill(self, no_restart: bool) -> None:
        if self._lease.owner and no_restart:
            self._lease.end()
            return
        self.native.kill(no_restart=no_restart)

    def _kill_quietly(self) -> None:
        with contextlib.suppress(Exception):
            self._kill(True)


class _ActorID(str):
    def hex(self) -> str:  # type: ignore[override]
        return str(self)


class _Builtin:
    """``handle.__ray_ready__`` / ``handle.__ray_terminate__``: ``.remote()`` gives a ref."""

    def __init__(self, handle: ActorHandle, start: Any) -> None:
        self._handle, self._start = handle, start

    def remote(self) -> ObjectRef:
        return ObjectRef(future=self._start(), what=f"{self._handle._label()}.{self._start.__name__}")


class ActorMethod:
    """``handle.m``: ``.remote(...)`` calls it, ``.options(...)`` overrides its ``@ray.method`` options."""

    def __init__(self, handle: ActorHandle, name: str, options: dict[str, Any]) -> None:
        self._handle, self._name = handle, name
        function = getattr(handle._cls, name, None) if handle._cls is not None else None
        self._generator = inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function)
        self._options = {**(getattr(function, RAY_METHOD, None) or {}), **options}
        self._signature = _method_signature(handle._cls, name)

    def _remote(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        """Ray's ``a.m._remote(args=, kwargs=, **options)``: ``a.m.options(**options).remote(*args, **kwargs)``."""
        return self.options(**options).remote(*(args or ()), **(kwargs or {}))

    def options(self, **options: Any) -> ActorMethod:
        opts.check(options, opts.METHOD, f"method {self._name!r}.options")
        return ActorMethod(self._handle, self._name, {**self._options, **options})

    def bind(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("Ray DAGs (.bind) are not supported by runtime.ray_compat; call .remote()")

    def _target(self, streaming: bool) -> Callable[[], Any]:
        """A function giving the native method to call once the actor is constructed; it holds the lease, not the
        handle (a call in flight must not keep the handle alive: Ray ends an actor once its handles are gone)."""
        lease, name, generator = self._handle._lease, self._name, self._generator
        group = self._options.get("concurrency_group")

        def target() -> Any:
            ref = lease.native().method(name)
            if group is not None:
                return ref.options(concurrency_group=group, stream=streaming or None)
            return ref.options(stream=True) if streaming and not generator else ref

        return target

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        handle, what = self._handle, f"{self._handle._label()}.{self._name}"
        if self._signature is not None:  # a bad call raises here, as in Ray (TypeError as Python's)
            self._signature.bind(None, *args, **kwargs)
        options = self._options
        num_returns = opts.num_returns(options.get("num_returns", "streaming" if self._generator else 1), what)
        if num_returns == "streaming":
            target = self._target(True)()
            with handle._order:  # sent now, so after the calls before it
                if (previous := handle._last_sent) is not None:
                    concurrent.futures.wait([previous])
                args, kwargs = resolve_args(args, kwargs)
                return ObjectRefGenerator(target(*args, **kwargs))
        if self._generator:
            raise NotImplementedError(
                f"{what} is a generator method: num_returns={num_returns!r} would collect it; iterate it as a "
                "stream (num_returns='streaming', the default) and list() the values"
            )
        retries = int(options.get("max_task_retries", handle._max_task_retries))
        retryable = retry_on(options.get("retry_exceptions", False), what)
        lease, target = handle._lease, self._target(False)
        should_retry = lambda exc: lease.native().dead is None and retryable(exc)  # noqa: E731 - never once dead for good
        submit = lambda a, k: target()(*a, **k)  # noqa: E731 - resolved once the actor is constructed
        with handle._order:  # the caller's calls to this actor are sent in the order they were made
            ready = arguments_ready(args, kwargs, after=handle._last_sent)
            call = RetryingCall(submit, retries, should_retry, ready or (args, kwargs), failure=lease.described)
            handle._last_sent = None if call.submitted.done() else call.submitted
        handle._lease.track(call.future)
        task_interrupt.adopt(call)  # made in a task: ray.cancel of the task cancels it too (recursive)
        return refs_for(call, num_returns, what)


_MAX_PARAMS = 256  # parameters of a method handed over: bounded, it comes from another process


def _method_signature(cls: type | None, name: str) -> inspect.Signature | None:
    """The signature (with ``self``) of a plain method of ``cls``; None when it is not one (unknown class, static or
    class method, a builtin): its call is checked where it runs."""
    function = inspect.getattr_static(cls, name, None) if cls is not None else None
    if not inspect.isfunction(function):
        return None
    try:
        return inspect.signature(function)
    except (TypeError, ValueError):
        return None


def _method_state(method: ActorMethod) -> dict[str, Any]:
    """A method handed to another process: its parameters go along (name, kind, whether it has a default), so a
    bad call still raises at ``.remote()`` where the class cannot be imported."""
    params = None
    if method._signature is not None:
        params = [[p.name, int(p.kind), p.default is not p.empty] for p in method._signature.parameters.values()]
    return {"handle": method._handle, "name": method._name, "options": method._options, "params": params}


def _method_from(state: dict[str, Any]) -> ActorMethod:
    handle, name = state.get("handle"), state.get("name")
    if not isinstance(handle, ActorHandle) or not isinstance(name, str) or not isinstance(state.get("options"), dict):
        raise ValueError("a ray_compat actor method's state holds its handle, name and options")
    method = ActorMethod(handle, name, state["options"])
    params = state.get("params")
    if method._signature is None and isinstance(params, list) and len(params) <= _MAX_PARAMS:
        with contextlib.suppress(TypeError, ValueError):  # a malformed list: left unchecked, as before
            method._signature = inspect.Signature(
                [
                    inspect.Parameter(n, inspect._ParameterKind(k), default=None if d else inspect.Parameter.empty)
                    for n, k, d in params
                ]
            )
    return method


def _handle_state(handle: ActorHandle) -> dict[str, Any]:
    handle._lease.shared = True  # another process may hold it now: never ended when collected here
    return {"handle": handle.native}


def _handle_from(state: dict[str, Any]) -> ActorHandle:
    inner = state.get("handle") if isinstance(state, dict) else None
    if not isinstance(inner, NativeHandle):
        raise ValueError("a ray_compat actor handle's state holds a runtime ActorHandle")
    return ActorHandle(inner)


register_type(ActorHandle, to_state=_handle_state, from_state=_handle_from)
register_type(ActorMethod, to_state=_method_state, from_state=_method_from)
