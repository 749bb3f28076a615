"""Running one accepted call: the deadline and argument checks, the method itself, its outcome as RESULT frames."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Callable
from typing import Any, Protocol

from runtime.actor import actor_exit
from runtime.actor.builtin_methods import Builtin, BuiltinHost
from runtime.actor.call_store import CallRecord
from runtime.actor.server_phase import LEAVING_PHASES, ServerPhase
from runtime.core.errors import CallRejected
from runtime.core.metadata import MethodInfo
from runtime.core.outcome import arguments_bind, error_frames, result_frames
from transport.codec import Buffer, decode


class RunnerHost(BuiltinHost, Protocol):
    """What the runner needs of its server (:class:`runtime.actor.actor_server.ActorServer` is one): the instance whose
    methods it runs, hooks, the counters, and a way out; built-in methods get the server itself."""

    hooks: list[Callable[[str, str, float], None]]  # (method, outcome, seconds) observers
    leaving: str | None  # why the process leaves, set before its phase becomes a leaving one

    @property
    def phase(self) -> ServerPhase: ...

    def leave(self, code: int, cause: str) -> str:
        """Leave the process with exit ``code`` because of ``cause``; returns what callers are told."""
        ...


class CallRunner:
    """Runs the calls of one actor server: its instance, name, boot id, hooks and error count.

    A sync call runs on the lane thread that takes it, an async one as a task on its concurrency group's loop;
    either way the outcome (the value, or an error with its code) comes back as the frames the server records and
    sends, and the method's name, outcome and duration go to the server's hooks (the metrics)."""

    def __init__(self, server: RunnerHost) -> None:
        self._server = server

    def run(
        self,
        record: CallRecord,
        info: MethodInfo | None,
        builtin: Builtin | None,
        deadline: float | None,
        body: Buffer,
        buffers: list[Buffer],
    ) -> list[Buffer]:
        """Run a sync method (or a built-in, ``builtin``) on this thread; returns the RESULT frames."""
        server = self._server
        started = time.perf_counter()
        try:
            if record.cancelled:
                raise _cancelled()
            args, kwargs = self._prepare(record, info, deadline, body, buffers)
            if builtin is not None:
                extra = (record.peer,) if builtin.takes_peer else ()
                value = builtin.function(server, *extra, *args, **kwargs)
            else:
                value = getattr(server.instance, info.name)(*args, **kwargs)
                info.check_result(value, actor=server.name)  # a mismatch: a RemoteError naming the types
        except _Refused as refused:
            return self._failed(record, refused.code, refused, started)
        except Exception as exc:
            return self._failed(record, "remote", exc, started)
        except BaseException as exc:  # SystemExit, KeyboardInterrupt, exit_actor(): the process leaves
            return self._leave(record, exc, started)
        self._observe(record.method, "ok", started)
        return result_frames(record, server.boot_id, value)

    async def run_async(
        self,
        record: CallRecord,
        info: MethodInfo,
        deadline: float | None,
        body: Buffer,
        buffers: list[Buffer],
        slots: asyncio.Semaphore | None,
    ) -> list[Buffer]:
        """Await an async method once one of ``slots`` is free (its concurrency limit; None: control-plane, no
        limit); returns the RESULT frames."""
        started = time.perf_counter()  # waiting for a slot counts as part of the call
        try:
            async with slots if slots is not None else contextlib.nullcontext():
                if record.cancelled:
                    raise _cancelled()
                args, kwargs = self._prepare(record, info, deadline, body, buffers)
                method = getattr(self._server.instance, info.name)
                value = method(*args, **kwargs)
                if inspect.iscoroutinefunction(method):  # else a sync method run on the loop (called_by_name)
                    value = await value
                info.check_result(value, actor=self._server.name)
        except _Refused as refused:
            return self._failed(record, refused.code, refused, started)
        except Exception as exc:
            return self._failed(record, "remote", exc, started)
        except asyncio.CancelledError as exc:  # raised by the method, or its task cancelled: never silence
            return self._cancelled_frames(record, exc, started)
        except BaseException as exc:  # SystemExit, KeyboardInterrupt, exit_actor(): the process leaves
            return self._leave(record, exc, started)
        self._observe(record.method, "ok", started)
        return result_frames(record, self._server.boot_id, value)

    async def run_builtin_async(
        self, record: CallRecord, builtin: Builtin, deadline: float | None, body: Buffer, buffers: list[Buffer]
    ) -> list[Buffer]:
        """Await an async built-in (``__stream_next__``) on the server's loop; returns the RESULT frames."""
        started = time.perf_counter()
        try:
            if record.cancelled:
                raise _cancelled()
            args, kwargs = self._prepare(record, None, deadline, body, buffers)
            extra = (record.peer,) if builtin.takes_peer else ()
            value = await builtin.function(self._server, *extra, *args, **kwargs)
        except BaseException as exc:
            return self.failure_frames(record, exc, started)
        return self.ok_frames(record, value, started)

    @property
    def host(self) -> RunnerHost:
        return self._server

    def prepare(
        self, record: CallRecord, info: MethodInfo, deadline: float | None, body: Buffer, buffers: list[Buffer]
    ) -> tuple[list[Any], dict[str, Any]]:
        """The checked arguments of a call about to run (raising a refusal when it must not run)."""
        if record.cancelled:
            raise _cancelled()
        return self._prepare(record, info, deadline, body, buffers)

    def failure_frames(self, record: CallRecord, exc: BaseException, started: float) -> list[Buffer]:
        """The RESULT frames of a call that raised ``exc``, as :meth:`run_async` answers it."""
        if isinstance(exc, _Refused):
            return self._failed(record, exc.code, exc, started)
        if isinstance(exc, Exception):
            return self._failed(record, "remote", exc, started)
        if isinstance(exc, asyncio.CancelledError):
            return self._cancelled_frames(record, exc, started)
        return self._leave(record, exc, started)

    def refused_frames(self, record: CallRecord, code: str, message: str) -> list[Buffer]:
        """The RESULT frames of a call refused before it ran (``code`` from runtime.core.errors.ERROR_CODES)."""
        return self._failed(record, code, _Refused(code, message), time.perf_counter())

    def ok_frames(self, record: CallRecord, value: Any, started: float) -> list[Buffer]:
        self._observe(record.method, "ok", started)
        return result_frames(record, self._server.boot_id, value)

    def _cancelled_frames(self, record: CallRecord, exc: BaseException, started: float) -> list[Buffer]:
        if self._server.phase in LEAVING_PHASES:  # cancelled because the process leaves: already answered
            return self._failed(record, "exited", exc, started, self._server.leaving)
        if record.cancelled:  # its caller cancelled it (PendingCall.cancel)
            return self._failed(record, "cancelled", exc, started, "the call was cancelled by its caller")
        return self._failed(record, "remote", exc, started, "the method was cancelled before it returned")

    def _prepare(
        self,
        record: CallRecord,
        info: MethodInfo | None,
        deadline: float | None,
        body: Buffer,
        buffers: list[Buffer],
    ) -> tuple[list[Any], dict[str, Any]]:
        if deadline is not None and time.time() > deadline:
            raise _Refused("deadline", "the deadline passed before the call started; it was not run")
        args, kwargs = decode(body, buffers, bind=arguments_bind(record.call_id))
        if info is not None:  # never trust the caller's own check: it is another process
            try:
                info.bind(tuple(args), kwargs, actor=self._server.name)
            except CallRejected as exc:
                raise _Refused("rejected", str(exc)) from None
        return args, kwargs

    def _failed(
        self, record: CallRecord, code: str, exc: BaseException, started: float, message: str = ""
    ) -> list[Buffer]:
        server = self._server
        server.stats["errors_total"] += 1
        self._observe(record.method, "error" if code == "remote" else code, started)
        if isinstance(exc, _Refused):
            record.refused = True
            return error_frames(record.call_id, server.boot_id, code, exc.message)
        return error_frames(record.call_id, server.boot_id, code, message, exc=exc)

    def _leave(self, record: CallRecord, exc: BaseException, started: float) -> list[Buffer]:
        """The method raised a BaseException that is not an error but a way out: the process leaves with the
        exit code it implies, after answering this call and every other one in flight (ActorDied)."""
        reason = self._server.leave(actor_exit.exit_code_of(exc), actor_exit.describe(exc, record.method))
        return self._failed(record, "exited", exc, started, reason)

    def _observe(self, method_name: str, outcome: str, started: float) -> None:
        hooks = self._server.hooks
        if hooks:
            elapsed = time.perf_counter() - started
            for hook in hooks:
                hook(method_name, outcome, elapsed)


class _Refused(Exception):
    """A call refused before user code ran (deadline passed, bad arguments, cancelled by its caller)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _cancelled() -> _Refused:
    return _Refused("cancelled", "the call was cancelled by its caller before it started; it was not run")
