"""Running a streaming call on the actor: the generator method, its items into the call's stream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from runtime.actor.call_runner import CallRunner
from runtime.actor.call_store import CallRecord
from runtime.actor.server_lanes import ServerLanes
from runtime.actor.stream_table import Stream
from runtime.core.metadata import MethodInfo
from runtime.core.stream_hints import plain_call_problem
from transport.codec import Buffer

_END = object()  # what a generator gives past its last item

Finish = Callable[[tuple[CallRecord, list[Buffer]]], None]


class StreamRunner:
    """Starts the streaming calls of one server on its lanes; ``finish`` records and sends a call's RESULT.

    A sync generator runs on its group's thread lane, an async one as a task on its group's loop, as any call of
    the method would; each item is checked against the items' type (``-> Iterator[int]``) and put into the call's
    :class:`runtime.actor.stream_table.Stream`, waiting while the caller is a window behind. The RESULT comes once
    the generator is done: ``{"items": n, "closed": why or None}``, or the error it raised. A caller that closes
    the stream makes the generator close (``GeneratorExit`` at its ``yield``; an async one is cancelled where it
    waits)."""

    def __init__(self, runner: CallRunner, lanes: ServerLanes, finish: Finish) -> None:
        self._runner = runner
        self._lanes = lanes
        self._finish = finish

    def start(
        self, record: CallRecord, info: MethodInfo, deadline: float | None, body: Buffer, buffers: list[Buffer]
    ) -> None:
        """Open the call's stream (before any ``__stream_next__`` for it can arrive) and queue its producer."""
        host = self._runner.host
        if not info.stream_call:
            problem = plain_call_problem(host.name, info.name)
            self._finish((record, self._runner.refused_frames(record, "rejected", problem)))
            return
        stream = host.streams.open(record.call_id, record.peer)
        if stream is None:
            problem = f"actor {host.name!r} holds too many open streams; close some (break out of their loops)"
            self._finish((record, self._runner.refused_frames(record, "over_capacity", problem)))
            return
        group = info.options.concurrency_group
        if info.is_async:
            slots = self._lanes.async_slots[group]

            async def produce_async() -> None:
                self._finish((record, await self._run_async(record, info, stream, slots, deadline, body, buffers)))

            self._lanes.group_loops[group].start(produce_async)
        else:
            self._lanes.threads[group].submit(
                lambda: (record, self._run(record, info, stream, deadline, body, buffers))
            )

    def _run(
        self,
        record: CallRecord,
        info: MethodInfo,
        stream: Stream,
        deadline: float | None,
        body: Buffer,
        buffers: list[Buffer],
    ) -> list[Buffer]:
        started = time.perf_counter()
        count = 0
        try:
            args, kwargs = self._begin(record, info, stream, deadline, body, buffers)
            generator = getattr(self._runner.host.instance, info.name)(*args, **kwargs)
            try:
                while stream.wait_room():
                    item = next(generator, _END)
                    if item is _END:
                        break
                    info.check_result(item, actor=self._runner.host.name)
                    stream.put(item)
                    count += 1
            finally:
                generator.close()
        except BaseException as exc:
            return self._runner.failure_frames(record, exc, started)
        finally:
            stream.finish()
        return self._runner.ok_frames(record, {"items": count, "closed": stream.closed}, started)

    async def _run_async(
        self,
        record: CallRecord,
        info: MethodInfo,
        stream: Stream,
        slots: asyncio.Semaphore,
        deadline: float | None,
        body: Buffer,
        buffers: list[Buffer],
    ) -> list[Buffer]:
        record.task = stream.task = asyncio.current_task()  # what a cancel, or closing the stream, cancels
        started = time.perf_counter()
        count = 0
        try:
            async with slots:
                args, kwargs = self._begin(record, info, stream, deadline, body, buffers)
                generator = getattr(self._runner.host.instance, info.name)(*args, **kwargs)
                try:
                    while await stream.wait_room_async():
                        item = await anext(generator, _END)
                        if item is _END:
                            break
                        info.check_result(item, actor=self._runner.host.name)
                        stream.put(item)
                        count += 1
                finally:
                    await generator.aclose()
        except asyncio.CancelledError as exc:
            if stream.closed is None or record.cancelled:
                return self._runner.failure_frames(record, exc, started)
        except BaseException as exc:
            return self._runner.failure_frames(record, exc, started)
        finally:
            stream.finish()
        return self._runner.ok_frames(record, {"items": count, "closed": stream.closed}, started)

    def _begin(
        self,
        record: CallRecord,
        info: MethodInfo,
        stream: Stream,
        deadline: float | None,
        body: Buffer,
        buffers: list[Buffer],
    ) -> tuple[list[Any], dict[str, Any]]:
        if stream.closed is not None:
            record.cancelled = True  # closed before it started: it never runs
        return self._runner.prepare(record, info, deadline, body, buffers)
