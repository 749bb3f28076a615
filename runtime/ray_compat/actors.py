"""``@ray.remote`` classes: ``Cls.options(...).remote(*args)`` starts the actor and returns its handle at once (Ray's
python/ray/actor.py and python/ray/_private/ray_option_utils.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import os
from typing import Any

import cloudpickle

from runtime.caller.client import ClientRuntime
from runtime.caller.handle_names import checked_class_info
from runtime.core.metadata import method as native_method
from runtime.names import naming
from runtime.names.name_registry import check_name
from runtime.placement import lease_owner
from runtime.placement.placement_api import call
from runtime.placement.placement_types import Grant
from runtime.processes.spawn import spawn_async
from runtime.processes.spawn_names import live_holder, taken
from runtime.ray_compat import cluster, placement, state
from runtime.ray_compat import options as opts
from runtime.ray_compat.actor_classes import bind_arguments, keyword_class
from runtime.ray_compat.calls import Arguments, resolve_args
from runtime.ray_compat.handles import RAY_METHOD, ActorHandle, ActorMethod, Lease, failed
from runtime.ray_compat.runtime_context import RAY_GPU_IDS
from transport.security import FROM_ENV

#: How long an actor's constructor may run (Ray has no limit; verl's workers load models in theirs).
CONSTRUCT_DEADLINE_S = float(os.environ.get("MILES_RAY_COMPAT_CONSTRUCT_S", "3600"))
#: Set (to anything but 0) in the driver's or the actor's environment, as Ray's: a GPU actor keeps the
#: CUDA_VISIBLE_DEVICES it inherits; ``ray.get_gpu_ids()`` still names its GPUs (from GPU_IDS_ENV).
NOSET_CUDA = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"
GPU_IDS_ENV = RAY_GPU_IDS

__all__ = ["ActorClass", "ActorHandle", "ActorMethod", "make_actor_class", "method"]


def method(*args: Any, **options: Any) -> Any:
    """``@ray.method(num_returns=, concurrency_group=, max_task_retries=, retry_exceptions=)``."""
    opts.check(options, opts.METHOD, "ray.method")
    if "num_returns" in options:
        opts.num_returns(options["num_returns"], "ray.method")

    def mark(function: Any) -> Any:
        setattr(function, RAY_METHOD, dict(options))
        if "concurrency_group" in options:
            native_method(function, concurrency_group=options["concurrency_group"])
        return function

    if args and callable(args[0]) and len(args) == 1 and not options:
        return mark(args[0])
    if args:
        raise TypeError("ray.method takes keyword options only: @ray.method(num_returns=2)")
    return mark


def make_actor_class(cls: type, options: dict[str, Any]) -> ActorClass:
    """The ``@ray.remote`` object for ``cls``: as Ray's, an instance of ``ActorClass(Name)``, a class deriving
    from :class:`ActorClass` and ``cls``, so ``getattr(Actor, "m")``, class attributes and ``dir(Actor)`` are the
    class's (verl binds its worker-group methods by walking them); a plain ActorClass where Python cannot derive
    one (a metaclass conflict, an ``__init_subclass__`` that refuses)."""
    opts.check(dict(options), opts.ACTOR, f"@ray.remote class {cls.__qualname__}")
    try:
        name = f"ActorClass({cls.__name__})"
        derived = type(name, (ActorClass, cls), {"__module__": cls.__module__, "__qualname__": name})
        actor_class = object.__new__(derived)
    except TypeError:
        actor_class = object.__new__(ActorClass)
    vars(actor_class).update(_ray_cls=cls, _ray_options=dict(options), __ray_actor_class__=cls)
    vars(actor_class).update(__name__=cls.__name__, __doc__=cls.__doc__)
    return actor_class


class ActorClass:
    """A class under ``@ray.remote``: ``.remote(...)`` starts an actor, ``.options(...)`` overrides options."""

    # make_actor_class sets _ray_cls (the user's class) and _ray_options on each instance: __init__ refuses to run.

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("ActorClass is made by @ray.remote, not instantiated directly")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"Actors cannot be instantiated directly. Instead of '{self._ray_cls.__name__}()', use "
            f"'{self._ray_cls.__name__}.remote()'."
        )

    def __repr__(self) -> str:
        return f"ActorClass({self._ray_cls.__qualname__})"

    def __deepcopy__(self, memo: dict[int, Any]) -> ActorClass:
        return self

    def options(self, **options: Any) -> ActorClass:
        return make_actor_class(self._ray_cls, {**self._ray_options, **options})

    def bind(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("Ray DAGs (.bind) are not supported by runtime.ray_compat; call .remote()")

    def _remote(self, args: Any = None, kwargs: Any = None, **options: Any) -> ActorHandle:
        """Ray's ``A._remote(args=, kwargs=, **options)``: ``A.options(**options).remote(*args, **kwargs)``."""
        return self.options(**options).remote(*(args or ()), **(kwargs or {}))

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        """Start the actor; its handle comes back at once (construction goes on in the background). What can be
        checked here raises here: the class, the options, the arguments, the resources, a name already taken.

        The actor is a ``runtime.spawn`` actor on this machine; its resources come from the session's ledger or a
        placement-group bundle (:mod:`runtime.ray_compat.placement`), reserved at once; ``runtime_env`` env vars and
        its GPUs (``CUDA_VISIBLE_DEVICES``) go into its environment. As in Ray, calls made while it is constructed
        queue behind construction (:mod:`runtime.ray_compat.handles`)."""
        options, cls = self._ray_options, self._ray_cls
        name = options.get("name")
        what = f"actor {name if isinstance(name, str) else cls.__qualname__}"
        session = state.current()
        namespace = options.get("namespace") or session.namespace or naming.DEFAULT_NAMESPACE
        for option, value in (("name", name), ("namespace", namespace)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{what}: {option} must be None or a string, got {type(value).__name__}")
            if value:
                check_name(option, value)
        _check_size(cls)
        wrapper = keyword_class(cls)
        checked_class_info(wrapper, options.get("concurrency_groups"))
        bind_arguments(cls, args, kwargs)  # a bad call raises here; bound again once top-level refs have values
        if name is not None:
            found = _named(session, name, namespace, cls, what)
            if found is not None:
                if options.get("get_if_exists"):
                    return found
                raise taken(name, namespace, found.native)
        wants = opts.resources_of(options, 0.0, what)
        env, cwd = opts.runtime_env(options.get("runtime_env"), what)
        strategy = options.get("scheduling_strategy")
        ledger, group = placement.where(strategy, what)
        env = {**session.env, **env, **placement.captured_env(strategy)}
        grant = None
        if session.cluster:  # on a host of the launch: reserved there now (refused at once), GPUs set by the launcher
            if int(options.get("max_restarts", 0)) != 0:
                raise NotImplementedError(
                    f"{what}: max_restarts for an actor placed on a launch's hosts is not supported yet; "
                    "ray.init(num_cpus=...) keeps actors on this machine, where restarts work"
                )
            request = placement.request_for(strategy, wants, what)
            env = {**cluster.as_ray_env(), **env}
            grant = cluster.reserve(request, what, detached=options.get("lifetime") == "detached")
            gpu_ids = [str(gpu) for gpu in grant.gpu_ids]
        else:
            held, gpu_ids = ledger.reserve(wants, what)
        if wants.get("GPU"):
            env[GPU_IDS_ENV] = ",".join(gpu_ids)
            if grant is None and {**os.environ, **env}.get(NOSET_CUDA, "0") in ("", "0"):
                env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
        spawning = _spawn(cls, (args, kwargs), options, namespace, env, cwd, grant)
        keep = bool(name) or options.get("lifetime") == "detached"
        lease = Lease(spawning, name or cls.__name__, owner=True, keep=keep)
        lease.held = (ledger, held, gpu_ids) if grant is None else None  # a launch's lease ends with its actor
        spawning.add_done_callback(lambda f: failed(f) and lease.end())
        if name is not None:
            session.starting[(namespace, name)] = lease
            spawning.add_done_callback(lambda _: session.starting.pop((namespace, name), None))
        if options.get("lifetime") != "detached":
            session.actors.append(lease)
        if group is not None:
            group.actors.append(lease)
        return ActorHandle(None, cls=cls, max_task_retries=int(options.get("max_task_retries", 0)), lease=lease)


@functools.lru_cache(maxsize=256)
def _check_size(cls: type) -> None:
    """Ray's "is too large" for a class that travels by value (defined in a function) with a large capture."""
    opts.check_pickled_size(len(cloudpickle.dumps(cls)), f"The actor {cls.__name__}")


def _named(session: state.Session, name: str, namespace: str, cls: type, what: str) -> ActorHandle | None:
    """The actor holding ``name``: one this session is still starting, or a live registered one."""
    starting = session.starting.get((namespace, name))
    if starting is not None:
        return ActorHandle(None, cls=cls, lease=starting)
    holder, _ = ClientRuntime.get().run(live_holder(name, namespace, FROM_ENV), timeout_s=30, what=what)
    return ActorHandle(holder, cls=cls) if holder is not None else None


def _spawn(
    cls: type,
    arguments: Arguments,
    options: dict[str, Any],
    namespace: str,
    env: dict[str, str],
    cwd: str | None,
    grant: Grant | None = None,
) -> concurrent.futures.Future[Any]:
    """Spawn on the runtime's loop, not waiting: top-level refs among the arguments are resolved first. With
    ``grant`` (a lease on a launch's host) the actor starts there."""

    async def start() -> Any:
        try:
            args, kwargs = await asyncio.get_running_loop().run_in_executor(None, resolve_args, *arguments)
            return await spawn_async(
                keyword_class(cls), kwargs=bind_arguments(cls, args, kwargs), name=options.get("name"),
                namespace=namespace, get_if_exists=bool(options.get("get_if_exists", False)),
                lifetime=options.get("lifetime"), max_restarts=int(options.get("max_restarts", 0)),
                max_concurrency=options.get("max_concurrency"), concurrency_groups=options.get("concurrency_groups"),
                env=env, cwd=cwd, deadline_s=CONSTRUCT_DEADLINE_S, lease=grant,
            )  # fmt: skip
        except BaseException:
            if grant is not None:  # not started: the launch gets it back (twice is harmless)
                with contextlib.suppress(Exception):
                    await call("release", lease_id=grant.lease_id, owner=lease_owner.owner())
            raise

    return asyncio.run_coroutine_threadsafe(start(), ClientRuntime.get().loop)
