"""``@ray.remote`` functions: tasks, run on a pool of worker processes of this machine (Ray's
python/ray/remote_function.py: ``.remote``, ``.options``, ``num_returns``, ``max_retries``, ``retry_exceptions``)."""

from __future__ import annotations

import contextlib
import inspect
import os
import threading
from typing import Any

import cloudpickle

from runtime.caller.handle import ActorHandle as NativeHandle
from runtime.core.errors import ActorDied
from runtime.processes.spawn import spawn
from runtime.ray_compat import cluster, placement, state, task_interrupt
from runtime.ray_compat import options as opts
from runtime.ray_compat.calls import RetryingCall, arguments_ready, refs_for, resolve_args, retry_on
from runtime.ray_compat.exceptions import worker_crashed
from runtime.ray_compat.refs import ObjectRefGenerator
from runtime.ray_compat.task_slots import CpuHold
from runtime.ray_compat.task_worker import TaskWorker, mac_of

DEFAULT_MAX_RETRIES = 3  # as Ray's


class TaskPool:
    """Worker processes for tasks with one environment (one pool per distinct ``runtime_env``).

    As many workers as the session has CPUs (``ray.init(num_cpus=)``), started as tasks need them; each runs one
    task at a time, and a task goes to the least busy worker once the CPUs it asks for are free (``num_cpus``,
    default 1, held while it runs: :mod:`runtime.ray_compat.task_slots`; a streaming task takes none). A worker that
    dies is replaced and its task retried (``max_retries``, default 3, system failures). Task workers hold no GPUs:
    a task asking ``num_gpus`` is refused (use an actor, which gets its GPUs). Inside a launch, a task in a bundle of
    a placement group on another host runs on a pool placed on that host."""

    def __init__(self, size: int, env: dict[str, str], cwd: str | None, *, host: str | None = None) -> None:
        self.size = max(1, size)
        self._env, self._cwd = env, cwd
        self._host = host  # another host of the launch (a task in a bundle there): its workers are placed there
        self._secret = os.urandom(32)
        self._workers: list[NativeHandle] = []
        self._busy: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stopped = False

    def sign(self, function: bytes) -> bytes:
        return mac_of(self._secret, function)

    def _pick(self) -> NativeHandle:
        with self._lock:
            if self._stopped:
                raise RuntimeError("ray.shutdown() was called: this task was not started; call ray.init() again")
            live = [w for w in self._workers if w.dead is None]
            self._workers = live
            idle = min(live, key=lambda w: self._busy.get(id(w), 0), default=None)
            if idle is not None and (self._busy.get(id(idle), 0) == 0 or len(live) >= self.size):
                self._busy[id(idle)] = self._busy.get(id(idle), 0) + 1
                return idle
        env = {**cluster.as_ray_env(), **self._env} if self._host else self._env
        worker = spawn(TaskWorker, kwargs={"secret": self._secret}, env=env, cwd=self._cwd, host=self._host)
        with self._lock:
            stopped = self._stopped
            if not stopped:
                self._workers.append(worker)
                self._busy[id(worker)] = 1
        if stopped:  # ray.shutdown() ran while this worker started: it must not outlive the session
            with contextlib.suppress(Exception):
                worker.kill()
            raise RuntimeError("ray.shutdown() was called: this task was not started; call ray.init() again")
        return worker

    def _release(self, worker: NativeHandle, failed: BaseException | None) -> None:
        with self._lock:
            self._busy[id(worker)] = max(0, self._busy.get(id(worker), 1) - 1)
        if isinstance(failed, ActorDied):
            with contextlib.suppress(Exception):
                worker.kill()

    def submit(self, method: str, function: bytes, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A ``run`` (a :class:`TaskCall`) or ``stream`` (a StreamingCall) call of a task on a worker."""
        worker = self._pick()
        send = worker.method(method)
        if method == "stream":
            call = send(function, self.sign(function), list(args), kwargs)
        else:
            token = os.urandom(16)
            call = TaskCall(worker, send(function, self.sign(function), list(args), kwargs, token), token)
        call.future.add_done_callback(lambda f: self._release(worker, f.exception() if not f.cancelled() else None))
        return call

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            workers, self._workers = self._workers, []
        for worker in workers:
            with contextlib.suppress(Exception):
                worker.kill()


class TaskCall:
    """A task sent to a worker: its ``future``, and ``cancel`` as Ray's: a queued task never runs; a running one
    gets KeyboardInterrupt (or, ``force``, its worker ends), and its own calls are cancelled (``recursive``)."""

    __slots__ = ("_call", "_token", "_worker", "future")

    def __init__(self, worker: NativeHandle, call: Any, token: bytes) -> None:
        self._worker, self._call, self._token = worker, call, token
        self.future = call.future

    def cancel(self, force: bool = False, recursive: bool = True) -> bool:
        if not self._call.cancel():
            return False
        with contextlib.suppress(Exception):  # a worker that is gone runs nothing any more
            self._worker.method("interrupt")(self._token, recursive, force)
        return True


class RemoteFunction:
    """A function under ``@ray.remote``: ``.remote(...)`` runs it as a task, ``.options(...)`` overrides options."""

    def __init__(self, function: Any, options: dict[str, Any]) -> None:
        self._function = function
        self._what = f"task {getattr(function, '__qualname__', function)!s}"
        self._options = opts.check(dict(options), opts.TASK, f"@ray.remote function {self._what}")
        self._generator = inspect.isgeneratorfunction(function)
        if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
            raise ValueError(  # as Ray's: 'async def' is refused for tasks
                f"{self._what}: 'async def' should not be used for remote tasks; wrap it with asyncio.run(f()) "
                "or make it a method of an async actor"
            )
        self._pickled: bytes | None = None
        try:
            self._signature: inspect.Signature | None = inspect.signature(function)
        except (TypeError, ValueError):  # a builtin without one: checked where it runs
            self._signature = None
        self.__name__ = getattr(function, "__name__", "task")
        self.__doc__ = function.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"Remote functions cannot be called directly. Instead of running '{self.__name__}()', try "
            f"'{self.__name__}.remote()'."
        )

    def options(self, **options: Any) -> RemoteFunction:
        return RemoteFunction(self._function, {**self._options, **options})

    def bind(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("Ray DAGs (.bind) are not supported by runtime.ray_compat; call .remote()")

    def _remote(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        """Ray's ``f._remote(args=, kwargs=, **options)``: ``f.options(**options).remote(*args, **kwargs)``."""
        return self.options(**options).remote(*(args or ()), **(kwargs or {}))

    def _pool(self) -> tuple[TaskPool, float]:
        """The worker pool for this function's environment, and the CPUs a call holds while it runs."""
        options, what = self._options, self._what
        session = state.current()
        wants = opts.resources_of(options, 1.0, what)
        if wants.get("GPU"):
            raise NotImplementedError(
                f"{what}: num_gpus for a task is not supported (task workers hold no GPUs); run GPU work in an "
                "actor with num_gpus, which gets its GPUs in CUDA_VISIBLE_DEVICES"
            )
        ledger, _ = placement.where(options.get("scheduling_strategy"), what)
        host = placement.task_host(options.get("scheduling_strategy"))  # a bundle on another host of the launch
        for name, amount in wants.items():
            if amount > ledger.total.get(name, 0.0):
                raise ValueError(
                    f"{what} asks for {name}={amount:g}; the cluster (or bundle) has {ledger.total.get(name, 0.0):g}"
                )
        env, cwd = opts.runtime_env(options.get("runtime_env"), what)
        env = {**session.env, **env}
        key = (tuple(sorted(env.items())), cwd, host)
        cpus = wants.get("CPU", 1.0)
        with contextlib.suppress(KeyError):
            return session.pools[key], cpus
        size = int(ledger.total.get("CPU", 1) if host else session.ledger.total.get("CPU", 1))
        return session.pools.setdefault(key, TaskPool(size, env, cwd, host=host)), cpus

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        options, what = self._options, self._what
        num_returns = opts.num_returns(options.get("num_returns", "streaming" if self._generator else 1), what)
        pool, cpus = self._pool()
        if self._signature is not None:  # a bad call raises here, as in Ray (TypeError as Python's)
            self._signature.bind(*args, **kwargs)
        if self._pickled is None:
            pickled = cloudpickle.dumps(self._function)
            module = getattr(self._function, "__module__", "")
            opts.check_pickled_size(len(pickled), f"The remote function {module}.{self.__name__}")
            self._pickled = pickled
        function = self._pickled
        if num_returns == "streaming":
            if not self._generator:
                raise ValueError(f"{what}: num_returns='streaming' needs a generator function")
            return ObjectRefGenerator(pool.submit("stream", function, *resolve_args(args, kwargs)))
        if self._generator:
            raise NotImplementedError(f"{what}: a generator task streams (num_returns='streaming', the default)")
        retries = int(options.get("max_retries", DEFAULT_MAX_RETRIES))
        should_retry = retry_on(options.get("retry_exceptions", False), what)
        submit = lambda a, k: pool.submit("run", function, a, k)  # noqa: E731
        hold = CpuHold(state.current().slots, cpus)
        arguments = hold.when_granted(arguments_ready(args, kwargs) or (args, kwargs))
        call = RetryingCall(submit, retries, should_retry, arguments, forcible=True, failure=worker_crashed)
        call.future.add_done_callback(hold.settled)
        task_interrupt.adopt(call)
        return refs_for(call, num_returns, what)
