"""``@ray.remote`` classes: ``Cls.options(...).remote(*args)`` spawns the actor, ``handle.m.remote(x)`` calls it.

Ray sources read: python/ray/actor.py (ActorClass.options/remote, ActorMethod.options/remote, ``ray.method``,
generator methods streaming by default, ``max_task_retries``), python/ray/_private/ray_option_utils.py.
The actor is a ``runtime.spawn`` actor on this machine; its resources come from the session's ledger or a
placement-group bundle (:mod:`runtime.ray_compat.placement`); ``runtime_env`` env vars and its GPUs
(``CUDA_VISIBLE_DEVICES``) go into its environment.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import inspect
import threading
from typing import Any

from runtime import naming
from runtime.handle import ActorHandle as NativeHandle
from runtime.metadata import class_info
from runtime.metadata import method as native_method
from runtime.ray_compat import options as opts
from runtime.ray_compat import placement, state
from runtime.ray_compat.actor_classes import bind_arguments, keyword_class, original_class
from runtime.ray_compat.calls import RetryingCall, arguments_ready, refs_for, resolve_args, retry_on
from runtime.ray_compat.refs import ObjectRefGenerator
from runtime.spawn import spawn
from transport.type_registry import register_type

_RAY_METHOD = "__ray_method_options__"


def method(*args: Any, **options: Any) -> Any:
    """``@ray.method(num_returns=, concurrency_group=, max_task_retries=, retry_exceptions=)``."""
    opts.check(options, opts.METHOD, "ray.method")
    if "num_returns" in options:
        opts.num_returns(options["num_returns"], "ray.method")

    def mark(function: Any) -> Any:
        setattr(function, _RAY_METHOD, dict(options))
        if "concurrency_group" in options:
            native_method(function, concurrency_group=options["concurrency_group"])
        return function

    if args and callable(args[0]) and len(args) == 1 and not options:
        return mark(args[0])
    if args:
        raise TypeError("ray.method takes keyword options only: @ray.method(num_returns=2)")
    return mark


class ActorClass:
    """A class under ``@ray.remote``: ``.remote(...)`` starts an actor, ``.options(...)`` overrides options."""

    def __init__(self, cls: type, options: dict[str, Any]) -> None:
        self._cls = self.__ray_actor_class__ = cls
        self._options = opts.check(dict(options), opts.ACTOR, f"@ray.remote class {cls.__qualname__}")
        self.__name__ = cls.__name__
        self.__doc__ = cls.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"Actors cannot be instantiated directly. Instead of '{self._cls.__name__}()', use "
            f"'{self._cls.__name__}.remote()'."
        )

    def options(self, **options: Any) -> ActorClass:
        return ActorClass(self._cls, {**self._options, **options})

    def bind(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("Ray DAGs (.bind) are not supported by runtime.ray_compat; call .remote()")

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        options, cls = self._options, self._cls
        what = f"actor {options.get('name') or cls.__qualname__}"
        session = state.current()
        wants = opts.resources_of(options, 0.0, what)
        env, cwd = opts.runtime_env(options.get("runtime_env"), what)
        ledger, group = placement.where(options.get("scheduling_strategy"), what)
        held, gpu_ids = ledger.reserve(wants, what)
        env = {**session.env, **env}
        if wants.get("GPU"):
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
        try:
            args, kwargs = resolve_args(args, kwargs)
            inner = spawn(
                keyword_class(cls), kwargs=bind_arguments(cls, args, kwargs), name=options.get("name"),
                namespace=options.get("namespace") or session.namespace or naming.DEFAULT_NAMESPACE,
                get_if_exists=bool(options.get("get_if_exists", False)), lifetime=options.get("lifetime"),
                max_restarts=int(options.get("max_restarts", 0)), max_concurrency=options.get("max_concurrency"),
                concurrency_groups=options.get("concurrency_groups"), env=env, cwd=cwd,
            )  # fmt: skip
        except BaseException:
            ledger.release(held, gpu_ids)
            raise
        handle = ActorHandle(inner, cls=cls, max_task_retries=int(options.get("max_task_retries", 0)))
        handle._held = (ledger, held, gpu_ids)
        if options.get("lifetime") != "detached":
            session.actors.append(handle)
        if group is not None:
            group.actors.append(handle)
        return handle


class ActorHandle:
    """A Ray-shaped handle: ``handle.m.remote(...)``; passable to other actors and tasks."""

    def __init__(self, inner: NativeHandle, *, cls: type | None = None, max_task_retries: int = 0) -> None:
        self._inner = inner
        self._cls = cls or original_class(inner.class_path)
        if inner.info is None and self._cls is not None:
            with contextlib.suppress(Exception):
                inner.info = class_info(keyword_class(self._cls))
        self._max_task_retries = max_task_retries
        self._order = threading.Lock()
        self._last_sent: concurrent.futures.Future[None] | None = None  # the last call made, until it is sent
        self._held: tuple[Any, dict[str, float], list[str]] | None = None

    @property
    def native(self) -> NativeHandle:
        """This runtime's own handle of the actor."""
        return self._inner

    def __getattr__(self, name: str) -> ActorMethod:
        if name.startswith("_"):
            raise AttributeError(name)
        info = self._inner.info
        if info is not None and name not in info.methods:
            raise AttributeError(f"'ActorHandle' object has no attribute '{name}' (actor {self._inner.actor_name!r})")
        return ActorMethod(self, name, {})

    def __repr__(self) -> str:
        return f"Actor({self._inner.class_path.partition(':')[2].split('.<locals>.')[0]}, {self._actor_id.hex()})"

    @property
    def _actor_id(self) -> _ActorID:
        return _ActorID(f"{self._inner.actor_name}:{self._inner.boot_id or ''}")

    def _kill(self, no_restart: bool) -> None:
        self._inner.kill(no_restart=no_restart)
        if no_restart and self._held is not None:
            ledger, held, gpu_ids = self._held
            self._held = None
            ledger.release(held, gpu_ids)

    def _kill_quietly(self) -> None:
        with contextlib.suppress(Exception):
            self._kill(True)


class _ActorID(str):
    def hex(self) -> str:  # type: ignore[override]
        return str(self)


class ActorMethod:
    """``handle.m``: ``.remote(...)`` calls it, ``.options(...)`` overrides its ``@ray.method`` options."""

    def __init__(self, handle: ActorHandle, name: str, options: dict[str, Any]) -> None:
        self._handle, self._name = handle, name
        function = getattr(handle._cls, name, None) if handle._cls is not None else None
        self._generator = inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function)
        self._options = {**(getattr(function, _RAY_METHOD, None) or {}), **options}

    def options(self, **options: Any) -> ActorMethod:
        opts.check(options, opts.METHOD, f"method {self._name!r}.options")
        return ActorMethod(self._handle, self._name, {**self._options, **options})

    def bind(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("Ray DAGs (.bind) are not supported by runtime.ray_compat; call .remote()")

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        what = f"{self._handle._inner.actor_name}.{self._name}"
        options = self._options
        num_returns = opts.num_returns(options.get("num_returns", "streaming" if self._generator else 1), what)
        ref = self._handle._inner.method(self._name)
        if "concurrency_group" in options:
            ref = ref.options(concurrency_group=options["concurrency_group"], stream=num_returns == "streaming" or None)
        if num_returns == "streaming":
            if not self._generator:
                ref = ref.options(stream=True)
            with self._handle._order:  # sent now, so after the calls before it
                if (previous := self._handle._last_sent) is not None:
                    previous.result()
                args, kwargs = resolve_args(args, kwargs)
                return ObjectRefGenerator(ref(*args, **kwargs))
        if self._generator:
            raise NotImplementedError(
                f"{what} is a generator method: num_returns={num_returns!r} would collect it; iterate it as a "
                "stream (num_returns='streaming', the default) and list() the values"
            )
        retries = int(options.get("max_task_retries", self._handle._max_task_retries))
        retryable, inner = retry_on(options.get("retry_exceptions", False), what), self._handle._inner
        should_retry = lambda exc: inner.dead is None and retryable(exc)  # noqa: E731 - never once it is dead for good
        with self._handle._order:  # the caller's calls to this actor are sent in the order they were made
            ready = arguments_ready(args, kwargs, after=self._handle._last_sent)
            call = RetryingCall(lambda a, k: ref(*a, **k), retries, should_retry, ready or (args, kwargs))
            self._handle._last_sent = None if call.submitted.done() else call.submitted
        return refs_for(call, num_returns, what)


def _handle_state(handle: ActorHandle) -> dict[str, Any]:
    return {"handle": handle._inner}


def _handle_from(state: dict[str, Any]) -> ActorHandle:
    inner = state.get("handle") if isinstance(state, dict) else None
    if not isinstance(inner, NativeHandle):
        raise ValueError("a ray_compat actor handle's state holds a runtime ActorHandle")
    return ActorHandle(inner)


register_type(ActorHandle, to_state=_handle_state, from_state=_handle_from)
