"""The per-process client runtime: the event loop that carries calls, the ZeroMQ context, the connections."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, Protocol, TypeVar

from runtime.caller.connection import DEFAULT_LIVENESS_TIMEOUT_S, Connection
from runtime.core.errors import DeadlineExceeded
from runtime.core.event_loop import new_event_loop
from runtime.core.loop_work import LoopWork
from transport import shared_memory
from transport.security import CurveConfig
from transport.sockets import shared_context

T = TypeVar("T")


class SpawnedProcess(Protocol):
    """What shutdown needs of a process this one spawned (runtime.processes.process.ActorProcess is one)."""

    def kill(self, wait_s: float = ...) -> None: ...


class ClientRuntime:
    """Owns the loop thread (if any), the ZeroMQ context and one Connection per actor endpoint.

    In an actor process the loop is the actor's own; in a driver script it runs on a background thread, so the same
    handles serve plain synchronous code (``call.result()``) and asyncio code (``await call``). Calls are encoded
    and sent on the caller's thread (:class:`~runtime.caller.connection.Connection`); replies arrive on the loop."""

    _current: ClassVar[ClientRuntime | None] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, loop: asyncio.AbstractEventLoop, thread: threading.Thread | None) -> None:
        self.loop = loop
        self.thread = thread
        self.context = shared_context()
        self.connections: dict[tuple[str, str | None], Connection] = {}  # by (endpoint, CURVE key directory)
        self.processes: list[SpawnedProcess] = []  # killed at shutdown
        self._loop_thread_id = thread.ident if thread is not None else threading.get_ident()
        self.loop_work = LoopWork(loop, self._loop_thread_id, name="client runtime")  # what connections hand the loop
        self.closing = False  # set by shutdown: spawned actors that exit now are not restarted

    @classmethod
    def get(cls) -> ClientRuntime:
        """This process's runtime; starts a background loop thread on first use in a driver."""
        current = cls._current
        if current is not None:
            return current
        with cls._lock:
            if cls._current is None:
                cls._current = cls._start_background()
                atexit.register(cls._current.shutdown)
            return cls._current

    @classmethod
    def _start_background(cls) -> ClientRuntime:
        loop = new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(started.set)
            loop.run_forever()

        thread = threading.Thread(target=run, name="miles-runtime-loop", daemon=True)
        thread.start()
        if not started.wait(10.0):
            raise RuntimeError("the runtime's event loop thread did not start within 10 s")
        return cls(loop, thread)

    @classmethod
    def install_on_running_loop(cls) -> ClientRuntime:
        """Use the running loop (an actor process's) for this process's outgoing calls."""
        with cls._lock:
            cls._current = cls(asyncio.get_running_loop(), None)
            return cls._current

    def on_loop_thread(self) -> bool:
        return threading.get_ident() == self._loop_thread_id

    def connection(
        self,
        endpoint: str,
        *,
        actor: str,
        host: str,
        boot_id: str | None,
        machine_id: str = "",
        liveness_timeout_s: float = DEFAULT_LIVENESS_TIMEOUT_S,
        curve: CurveConfig | None = None,
        server_key: bytes | None = None,
    ) -> Connection:
        """The shared connection to ``endpoint`` with ``curve`` keys and the actor's ``server_key`` (a new one if
        the old one saw its actor die)."""
        key = (endpoint, curve.directory if curve is not None else None, server_key)
        with self._lock:
            conn = self.connections.get(key)
            # Shared by every handle of this actor, whatever incarnation each is pinned to: a call carries its
            # handle's pin (runtime.caller.connection), so one connection serves handles of old and new incarnations.
            if conn is None or conn.dead is not None:
                self._forget_dead()
                conn = Connection(
                    self.context,
                    self.loop_work,
                    endpoint,
                    actor=actor,
                    host=host,
                    boot_id=boot_id,
                    machine_id=machine_id,
                    liveness_timeout_s=liveness_timeout_s,
                    curve=curve,
                    server_key=server_key,
                )
                self.connections[key] = conn
            else:
                if conn.boot_id is None and boot_id is not None:
                    conn.boot_id = boot_id
                if machine_id:  # a bootstrap handle may have opened the connection knowing less
                    conn.actor, conn.host = actor, host
                    conn.same_machine = shared_memory.shared_with(machine_id)
            return conn

    def _forget_dead(self) -> None:
        """Drop the connections to dead actors whose sockets are closed (lock held; a dead one closes its socket
        itself, runtime.caller.connection; until then shutdown closes it)."""
        dead = [key for key, conn in self.connections.items() if conn.dead is not None and conn.socket_closed]
        for key in dead:
            del self.connections[key]

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop, from any thread (at once if the loop is gone, e.g. at exit)."""
        self.loop_work.run_soon(functools.partial(fn, *args) if args else fn)

    def run(self, coro: Coroutine[Any, Any, T], *, timeout_s: float, what: str) -> T:
        """Run ``coro`` on the loop and wait for it from another thread, at most ``timeout_s``."""
        if self.on_loop_thread():
            coro.close()
            raise RuntimeError(f"{what}: called from the runtime's event loop; use the async variant (await it)")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            if future.done():  # the coroutine's own TimeoutError (e.g. a DeadlineExceeded): not ours to rename
                raise
            future.cancel()
            raise DeadlineExceeded(f"{what} did not finish within {timeout_s} s") from None

    def shutdown(self) -> None:
        """Kill the actor processes this process spawned, close connections, stop the loop thread."""
        self.closing = True
        for process in list(self.processes):
            process.kill()
        if self.thread is None or not self.thread.is_alive():
            return

        def close_all() -> None:
            for conn in list(self.connections.values()):
                conn.close()
            self.loop.stop()

        self.loop.call_soon_threadsafe(close_all)
        self.thread.join(5.0)
