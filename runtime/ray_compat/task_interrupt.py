"""``ray.cancel`` of a running task: KeyboardInterrupt raised in it, as Ray does (or its worker ended: ``force``)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import threading
from typing import Any

_MAX_CHILDREN = 256  # finished child calls are dropped once this many are kept


class RunningTask:
    """One task on this thread, under its pool's token: :meth:`start` before calling it, :meth:`end` after
    (idempotent). A KeyboardInterrupt from :func:`interrupt` may fire anywhere between the two, :meth:`end`
    included: the caller catches it around both and checks :attr:`interrupted`."""

    __slots__ = ("children", "ident", "interrupted", "token", "waiting")

    def __init__(self, token: bytes) -> None:
        self.token = token
        self.ident = threading.get_ident()
        self.interrupted = False
        self.waiting: concurrent.futures.Future[None] | None = None  # set while blocked in wait()
        self.children: list[Any] = []  # calls made by the task (RetryingCall: .future, .cancel)

    def start(self) -> None:
        with _lock:
            _tasks[self.token] = self
        _here.task = self

    def end(self) -> None:
        _here.task = None
        with _lock:
            if _tasks.get(self.token) is self:
                del _tasks[self.token]
            if self.interrupted:
                _raise_in(self.ident, None)  # one still pending is withdrawn: it never lands after the task


# Each running task is registered under a token the pool made; the interrupt fires only while that task runs on that
# thread (the lock makes registration, interruption and leaving exclusive), at most once, and a KeyboardInterrupt still
# pending when the task ends is withdrawn, so it never lands in the runtime's own code.
_lock = threading.Lock()
_tasks: dict[bytes, RunningTask] = {}
_here = threading.local()


def _raise_in(ident: int, error: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(error) if error else None)


def interrupt(token: bytes, recursive: bool) -> bool:
    """Raise KeyboardInterrupt in the task running under ``token`` (once); False when none runs.

    Ray runs a task on its worker's main thread and sends it SIGINT. Here a task runs on a thread of its task worker
    (:class:`runtime.ray_compat.task_worker.TaskWorker`), so this raises KeyboardInterrupt in that thread
    (``PyThreadState_SetAsyncExc``): Python raises it at the thread's next bytecode, so a task busy in Python code
    or looping over short sleeps stops at once; one blocked in a single long C call (``time.sleep(600)``, a socket
    read) stops when that call returns; one blocked in ``ray.get`` waits through :func:`wait`, which wakes on the
    interrupt. The task's own calls (:func:`adopt`) are cancelled with it (``recursive``, Ray's default)."""
    with _lock:
        task = _tasks.get(token)
        if task is None or task.interrupted:
            return False
        task.interrupted = True
        if task.waiting is not None:  # blocked in ray.get: woken, it raises there itself
            task.waiting.set_result(None)
        else:
            _raise_in(task.ident, KeyboardInterrupt)
        children = list(task.children) if recursive else []
    if children:  # cancelling sends calls: not on the worker's event loop, where this runs
        threading.Thread(target=_cancel_all, args=(children,), name="ray-compat-cancel", daemon=True).start()
    return True


def _cancel_all(children: list[Any]) -> None:
    for child in children:
        with contextlib.suppress(Exception):
            child.cancel()


def adopt(call: Any) -> None:
    """Record ``call`` (made on this thread) as a child of the task running here, if any, for a recursive cancel."""
    task: RunningTask | None = getattr(_here, "task", None)
    if task is None:
        return
    with _lock:
        if len(task.children) >= _MAX_CHILDREN:
            task.children = [c for c in task.children if not c.future.done()]
        task.children.append(call)


def in_task() -> bool:
    """Whether this thread runs a task that ``ray.cancel`` may interrupt."""
    return getattr(_here, "task", None) is not None


def wait(future: concurrent.futures.Future[Any], timeout: float | None) -> None:
    """On a task's thread: wait until ``future`` is done or ``timeout`` passes, KeyboardInterrupt when the task is
    interrupted meanwhile. (One interrupted before, while it ran Python code, got its KeyboardInterrupt there, or
    gets it at its next bytecode, before this blocks: its cleanup code may wait again.)"""
    task: RunningTask | None = getattr(_here, "task", None)
    if task is None or future.done():  # elsewhere the caller's own wait (future.result) is the wait
        return
    woken: concurrent.futures.Future[None] = concurrent.futures.Future()
    with _lock:
        task.waiting = woken
    try:
        concurrent.futures.wait([future, woken], timeout, return_when=concurrent.futures.FIRST_COMPLETED)
    finally:
        with _lock:
            task.waiting = None
    if woken.done():
        raise KeyboardInterrupt


def running(token: bytes) -> bool:
    with _lock:
        return token in _tasks
