"""What ``.remote()`` does around a call: arguments resolved as Ray resolves them, retries, ``num_returns``.

Ray resolves an ObjectRef passed as a top-level argument (positional or keyword) to its value before the task
runs, and passes nested ones (inside a list, a dict) as refs. Here the caller waits for a top-level ref's value
before sending the call (Ray sends at once and lets the worker wait); nested refs cross as refs
(:mod:`runtime.ray_compat.refs`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from runtime import errors
from runtime.ray_compat.refs import ObjectRef

#: System failures a retry is for (Ray's max_retries / max_task_retries): the process died or restarted.
SYSTEM_FAILURES = (errors.ActorDied, errors.ActorRestarted, errors.NotDelivered)


def resolve_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Top-level refs become their values (waiting for them); anything nested is left as it is."""
    if not any(isinstance(a, ObjectRef) for a in args) and not any(isinstance(v, ObjectRef) for v in kwargs.values()):
        return args, kwargs
    args = tuple(a.result(None) if isinstance(a, ObjectRef) else a for a in args)
    kwargs = {k: v.result(None) if isinstance(v, ObjectRef) else v for k, v in kwargs.items()}
    return args, kwargs


def retry_on(retry_exceptions: Any, what: str) -> Callable[[BaseException], bool]:
    """Which failures a call with ``retry_exceptions`` (False, True or a list of classes) is retried on."""
    if retry_exceptions is False or retry_exceptions is None:
        return lambda exc: isinstance(exc, SYSTEM_FAILURES)
    if retry_exceptions is True:
        return lambda exc: isinstance(exc, (*SYSTEM_FAILURES, errors.RemoteError))
    if isinstance(retry_exceptions, (list, tuple)) and all(
        isinstance(c, type) and issubclass(c, BaseException) for c in retry_exceptions
    ):
        classes = tuple(retry_exceptions)
        return lambda exc: (
            isinstance(exc, SYSTEM_FAILURES) or (isinstance(exc, errors.RemoteError) and isinstance(exc, classes))
        )
    raise ValueError(
        f"{what}: retry_exceptions must be a bool or a list of exception classes, got {retry_exceptions!r}"
    )


class RetryingCall:
    """One logical call, resubmitted (``submit()``) up to ``retries`` times (-1: no limit) on the failures
    ``should_retry`` accepts; ``future`` settles with the last outcome."""

    def __init__(self, submit: Callable[[], Any], retries: int, should_retry: Callable[[BaseException], bool]) -> None:
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._submit, self._left, self._should_retry = submit, retries, should_retry
        self._lock = threading.Lock()
        self._call: Any = None
        self._start()

    def _start(self) -> None:
        try:
            call = self._submit()
        except BaseException as exc:
            self._settle(None, exc)
            return
        with self._lock:
            self._call = call
        call.future.add_done_callback(self._done)

    def _done(self, future: concurrent.futures.Future[Any]) -> None:
        if self.future.done():
            return
        try:
            value = future.result()
        except BaseException as exc:
            if self._left != 0 and self._should_retry(exc):
                self._left -= 1
                self._start()
                return
            self._settle(None, exc)
            return
        self._settle(value, None)

    def _settle(self, value: Any, error: BaseException | None) -> None:
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(value)

    def cancel(self) -> bool:
        self._left = 0
        with self._lock:
            call = self._call
        cancelled = call.cancel() if call is not None else False
        if cancelled:
            self._settle(None, errors.CallCancelled("the call was cancelled (ray.cancel)"))
        return cancelled


def refs_for(call: RetryingCall, num_returns: int, what: str) -> Any:
    """``num_returns=1``: one ref; ``0``: None; ``n``: n refs, one per item of the returned sequence."""
    if num_returns == 1:
        return ObjectRef(future=call.future, cancel=call.cancel, what=what)
    if num_returns == 0:
        return None
    parts: list[concurrent.futures.Future[Any]] = [concurrent.futures.Future() for _ in range(num_returns)]

    def split(future: concurrent.futures.Future[Any]) -> None:
        try:
            value = future.result()
            if not isinstance(value, (list, tuple)) or len(value) != num_returns:
                raise ValueError(
                    f"{what} has num_returns={num_returns} but returned {type(value).__name__} {value!r:.80}"
                )
        except BaseException as exc:
            for part in parts:
                part.set_exception(exc)
            return
        for part, item in zip(parts, value, strict=True):
            part.set_result(item)

    call.future.add_done_callback(split)
    return [ObjectRef(future=part, cancel=call.cancel, what=f"{what}[{i}]") for i, part in enumerate(parts)]
