"""What ``.remote()`` does around a call: arguments resolved as Ray resolves them, retries, ``num_returns``."""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from runtime.core import errors
from runtime.ray_compat.refs import ObjectRef

#: System failures a retry is for (Ray's max_retries / max_task_retries): the process died or restarted.
SYSTEM_FAILURES = (errors.ActorDied, errors.ActorRestarted, errors.NotDelivered)


Arguments = tuple[tuple[Any, ...], dict[str, Any]]
_resolver = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="ray-compat-args")


def _top_level_refs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[ObjectRef]:
    return [a for a in (*args, *kwargs.values()) if isinstance(a, ObjectRef)]


def resolve_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Arguments:
    """Top-level refs become their values (waiting for them); anything nested is left as it is.

    As Ray: an ObjectRef passed as a top-level argument (positional or keyword) is resolved to its value before the
    call runs; nested ones (inside a list, a dict) cross as refs (:mod:`runtime.ray_compat.refs`)."""
    if not _top_level_refs(args, kwargs):
        return args, kwargs
    args = tuple(a.result(None) if isinstance(a, ObjectRef) else a for a in args)
    kwargs = {k: v.result(None) if isinstance(v, ObjectRef) else v for k, v in kwargs.items()}
    return args, kwargs


def arguments_ready(
    args: tuple[Any, ...], kwargs: dict[str, Any], *, after: concurrent.futures.Future[None] | None = None
) -> concurrent.futures.Future[Arguments] | None:
    """None when the call can go now (no top-level ref, ``after`` done); else a future of the resolved arguments,
    set (on a resolver thread: a stored ref's value may be fetched) once every top-level ref is done and ``after``
    too, or failed with the first ref's error.

    So ``.remote()`` returns at once, as in Ray; a call whose ref failed fails with that error unsent, and ``after``
    (the caller's previous call to the same actor, sent) keeps calls to one actor in order."""
    waits = [ref.future for ref in _top_level_refs(args, kwargs)]
    if after is not None and not after.done():
        waits.append(after)
    if not waits:
        return None
    ready: concurrent.futures.Future[Arguments] = concurrent.futures.Future()
    left, lock = [len(waits)], threading.Lock()

    def resolve() -> None:
        try:
            ready.set_result(resolve_args(args, kwargs))
        except BaseException as exc:  # a ref's own error, as Ray raises it in the dependent call
            ready.set_exception(exc)

    def one_done(_: concurrent.futures.Future[Any]) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            _resolver.submit(resolve)

    for wait in waits:
        wait.add_done_callback(one_done)
    return ready


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
    """One logical call, resubmitted (``submit(args, kwargs)``) up to ``retries`` times (-1: no limit) on the
    failures ``should_retry`` accepts; ``future`` settles with the last outcome. ``ready``: the arguments, when
    they are not there yet (:func:`arguments_ready`); ``submitted`` is done once the call was first sent (or
    settled without being sent)."""

    def __init__(
        self,
        submit: Callable[[tuple[Any, ...], dict[str, Any]], Any],
        retries: int,
        should_retry: Callable[[BaseException], bool],
        arguments: Arguments | concurrent.futures.Future[Arguments],
        *,
        forcible: bool = False,
        failure: Callable[[BaseException], BaseException] | None = None,
    ) -> None:
        self.forcible = forcible  # a task's (ray.cancel(force=True) ends its worker); an actor call's is not
        self._failure = failure  # the error the caller sees for the call's last failure (ray.exceptions ones)
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.submitted: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._submit, self._left, self._should_retry = submit, retries, should_retry
        self._lock = threading.Lock()
        self._call: Any = None
        self._cancel: tuple[bool, bool] | None = None  # ray.cancel's (force, recursive), once it was called
        self._arguments: Arguments = ((), {})
        if isinstance(arguments, concurrent.futures.Future):
            arguments.add_done_callback(self._when_ready)
        else:
            self._arguments = arguments
            self._start()

    def _when_ready(self, ready: concurrent.futures.Future[Arguments]) -> None:
        if self.future.done():  # cancelled while it waited
            return
        try:
            self._arguments = ready.result()
        except BaseException as exc:
            self._settle(None, exc)
            return
        self._start()

    def _start(self) -> None:
        try:
            call = self._submit(*self._arguments)
        except BaseException as exc:
            self._settle(None, exc)
            if isinstance(exc, KeyboardInterrupt):  # ray.cancel of the task sending it (task_interrupt): its own
                raise
            return
        with self._lock:
            self._call = call
            cancel = self._cancel
        _set(self.submitted)
        if cancel is not None:  # ray.cancel came while it was being sent: cancelled there now
            self._cancel_sent(call, *cancel)
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
        if error is not None and self._failure is not None:
            error = self._failure(error)
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(value)
        _set(self.submitted)

    def cancel(self, force: bool = False, recursive: bool = True) -> bool:
        """Ray's ``ray.cancel``: one waiting for its arguments is never sent, one sent is cancelled there
        (``submit``'s call: a task's ``cancel(force, recursive)``, an actor call's ``cancel()``)."""
        if force and not self.forcible:
            raise ValueError("force=True is not supported for actor tasks.")  # Ray's words
        self._left = 0
        with self._lock:
            call, first = self._call, self._cancel is None
            self._cancel = (force, recursive)
            if call is None:  # waiting for its arguments (never sent), or being sent (cancelled once it is)
                if self.future.done() or not first:
                    return False
                self._settle(None, errors.CallCancelled("the call was cancelled (ray.cancel)"))
                return True
        return self._cancel_sent(call, force, recursive)

    def _cancel_sent(self, call: Any, force: bool, recursive: bool) -> bool:
        cancelled = call.cancel(force, recursive) if self.forcible else call.cancel()
        if cancelled:
            self._settle(None, errors.CallCancelled("the call was cancelled (ray.cancel)"))
        return cancelled


def _set(future: concurrent.futures.Future[None]) -> None:
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        future.set_result(None)


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
