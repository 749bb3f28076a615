"""``ObjectRef`` and ``ObjectRefGenerator`` as Ray code sees them: ``ray.get(ref)``, ``await ref``, ``ray.wait``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from typing import Any

from runtime.caller.stream_call import StreamingCall
from runtime.objects.object_owner import put as keep
from runtime.objects.object_owner import put_pending as keep_pending
from runtime.objects.object_refs import ObjectRef as StoredRef
from runtime.ray_compat import task_interrupt
from runtime.ray_compat.exceptions import GetTimeoutError, as_ray_error
from transport.type_registry import register_type


def _done(value: Any = None, error: BaseException | None = None) -> concurrent.futures.Future[Any]:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


def _awaitable(future: concurrent.futures.Future[Any]) -> asyncio.Future[Any]:
    """An asyncio future of the running loop that ``future`` settles. Not ``asyncio.wrap_future``: cancelling
    that one cancels ``future``, the ref's for every holder (Ray issue 8841: a timed-out await of a ref)."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[Any] = loop.create_future()

    def settle(done: concurrent.futures.Future[Any]) -> None:
        if waiter.cancelled():
            return
        if done.cancelled():
            waiter.cancel()
        elif done.exception() is not None:
            waiter.set_exception(done.exception())  # type: ignore[arg-type]
        else:
            waiter.set_result(done.result())

    def hand_over(done: concurrent.futures.Future[Any]) -> None:
        if not loop.is_closed():  # a loop that ended meanwhile awaits nothing any more
            loop.call_soon_threadsafe(settle, done)

    future.add_done_callback(hand_over)
    return waiter


class ObjectRef:
    """A future value: ``ray.get(ref)``, ``await ref``, ``ray.wait([ref])``, ``ray.cancel(ref)``.

    A call in flight (a task's or an actor method's result), a value ``ray.put`` keeps (:class:`runtime.ObjectRef`,
    fetched from its owner), or one item of a stream. Passed nested inside another argument (as Ray passes it), it
    crosses the wire as a :class:`runtime.ObjectRef`: a call's result is waited for and kept in this process first
    (``runtime.put``), so the receiver's ``ray.get`` fetches it from here."""

    def __init__(
        self,
        *,
        future: concurrent.futures.Future[Any] | None = None,
        stored: StoredRef | None = None,
        cancel: Callable[[bool, bool], bool] | None = None,
        what: str = "",
    ) -> None:
        self._future = future
        self._stored = stored
        self._cancel = cancel
        self._what = what
        self._id = os.urandom(14).hex()

    @property
    def future(self) -> concurrent.futures.Future[Any]:
        """Done once the value is there (for ``ray.wait``); a stored value counts as there."""
        if self._future is None:
            self._future = _done()
        return self._future

    def result(self, timeout: float | None) -> Any:
        """The value, or the error (as a ``ray.exceptions`` one) the call raised."""
        try:
            if self._stored is not None:
                if task_interrupt.in_task():  # fetched so that ray.cancel of the task wakes it (KeyboardInterrupt)
                    fetch = self._stored.owner.method("__object_get__")(self._stored.key)
                    task_interrupt.wait(fetch.future, timeout)
                    return fetch.result(timeout=0)
                return self._stored.get(timeout=timeout)
            if task_interrupt.in_task():  # waited so that ray.cancel of the task wakes it (KeyboardInterrupt)
                task_interrupt.wait(self.future, timeout)
                return self.future.result(0)
            return self.future.result(timeout)
        except concurrent.futures.TimeoutError:
            if self._stored is None and self.future.done():  # the call's own TimeoutError
                raise as_ray_error(self.future.exception()) from None
            raise GetTimeoutError(f"Get timed out: some object(s) not ready (timeout={timeout} s)") from None
        except BaseException as exc:
            raise as_ray_error(exc) from exc

    async def result_async(self) -> Any:
        try:
            if self._stored is not None:
                return await self._stored.get_async()
            return await _awaitable(self.future)
        except BaseException as exc:
            raise as_ray_error(exc) from exc

    def __await__(self) -> Generator[Any, None, Any]:
        return self.result_async().__await__()

    def as_future(self) -> asyncio.Future[Any]:
        """The value as an asyncio future of the running loop (Ray's ``ref.as_future()``); cancelling it leaves
        the call running, so the ref can still be awaited."""
        return asyncio.ensure_future(self.result_async())

    def cancel(self, force: bool = False, recursive: bool = True) -> bool:
        """``ray.cancel``: False when there is nothing to cancel (a stored value, a finished call)."""
        return self._cancel(force, recursive) if self._cancel is not None else False

    def hex(self) -> str:
        return self._id

    def __repr__(self) -> str:
        return f"ObjectRef({self._id}{', ' + self._what if self._what else ''})"

    def to_stored(self) -> StoredRef:
        """The ref as a :class:`runtime.ObjectRef` another process can fetch (a call's result is waited for)."""
        if self._stored is None:  # a call still running is not waited for: its holder's get waits (as in Ray)
            self._stored = keep(self.result(None)) if self.future.done() else keep_pending(self._settled())
        return self._stored

    def _settled(self) -> concurrent.futures.Future[Any]:
        """The call's future, with its error as the ``ray.exceptions`` one ``ray.get`` raises."""
        settled: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def copy(future: concurrent.futures.Future[Any]) -> None:
            try:
                settled.set_result(future.result())
            except BaseException as exc:
                settled.set_exception(as_ray_error(exc))

        self.future.add_done_callback(copy)
        return settled


def _from_stored(stored: StoredRef) -> ObjectRef:
    return ObjectRef(stored=stored)


register_type(ObjectRef, to_state=ObjectRef.to_stored, from_state=_from_stored)


class ObjectRefGenerator:
    """The refs of a streaming call's items (Ray's ``ObjectRefGenerator``): ``for ref in gen`` / ``async for``,
    ``next(gen)``; an error the generator raised comes as a ref whose ``ray.get`` raises it, then the end."""

    def __init__(self, stream: StreamingCall) -> None:
        self._stream = stream
        self._iter: Iterator[Any] | None = None
        self._aiter: AsyncIterator[Any] | None = None
        self._failed = False

    def __iter__(self) -> ObjectRefGenerator:
        return self

    def __next__(self) -> ObjectRef:
        if self._failed:
            raise StopIteration
        if self._iter is None:
            self._iter = iter(self._stream)
        try:
            return ObjectRef(future=_done(next(self._iter)), what="streamed item")
        except StopIteration:
            raise
        except Exception as exc:
            self._failed = True
            return ObjectRef(future=_done(error=exc), what="streamed error")

    def __aiter__(self) -> ObjectRefGenerator:
        return self

    async def __anext__(self) -> ObjectRef:
        if self._failed:
            raise StopAsyncIteration
        if self._aiter is None:
            self._aiter = aiter(self._stream)
        try:
            return ObjectRef(future=_done(await anext(self._aiter)), what="streamed item")
        except StopAsyncIteration:
            raise
        except Exception as exc:
            self._failed = True
            return ObjectRef(future=_done(error=exc), what="streamed error")

    def close(self) -> None:
        self._stream.close()

    def cancel(self, force: bool = False, recursive: bool = True) -> bool:
        self._stream.close()
        return True

    @property
    def future(self) -> concurrent.futures.Future[Any]:
        """Done once the next item (or the end) is here: ``ray.wait`` on a generator."""
        return self._stream.ready()

    def __del__(self) -> None:
        self._stream.close()
