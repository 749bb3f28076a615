"""Streaming results: a generator method's items reach the caller as they are produced, with backpressure,
cancellation and an error raised at the item where it happened; sync and async generators. Real actor processes
(one, shared by the module's tests)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from stream_actors import Producer

from runtime import ActorHandle, CallRejected, RemoteError, spawn
from runtime.actor.stream_table import StreamTable, stream_close
from runtime.caller.handle import MethodRef
from runtime.caller.stream_call import StreamingCall

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def producer() -> Iterator[ActorHandle]:
    handle = spawn(Producer, name="stream-producer")
    try:
        yield handle
    finally:
        handle.kill()


def _until(predicate, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_items_arrive_in_order(producer: ActorHandle) -> None:
    stream = producer.count(500)
    assert isinstance(stream, StreamingCall)
    assert list(stream) == list(range(500))
    assert producer.state("count").result(timeout=5) == [500, True]


def test_an_item_arrives_before_the_generator_goes_on(producer: ActorHandle) -> None:
    stream = producer.gated()
    assert stream.next(timeout=5) == "before the gate"  # the generator is still waiting at its gate
    producer.open_gate().result(timeout=5)
    assert stream.next(timeout=5) == "after the gate"
    with pytest.raises(StopIteration):
        stream.next(timeout=5)


def test_backpressure_holds_the_producer_a_window_ahead(producer: ActorHandle) -> None:
    stream = producer.count.options(window=4)(1000, tag="bp")
    assert stream.next(timeout=5) == 0
    _until(lambda: producer.state("bp").result(timeout=5)[0] == 4, "the producer to fill its window of 4")
    time.sleep(0.3)
    assert producer.state("bp").result(timeout=5) == [4, False]  # held: the caller took 1, said it consumed 0
    assert [stream.next(timeout=5) for _ in range(5)] == [1, 2, 3, 4, 5]
    time.sleep(0.2)
    produced, _ = producer.state("bp").result(timeout=5)
    assert produced <= 6 + 4  # never more than a window past what the caller consumed
    stream.close()


def test_breaking_out_closes_the_generator_in_the_actor(producer: ActorHandle) -> None:
    for item in producer.count(10_000, tag="brk"):
        if item == 3:
            break
    _until(lambda: producer.state("brk").result(timeout=5)[1], "the generator's finally to run")
    produced, _ = producer.state("brk").result(timeout=5)
    assert produced < 100
    assert producer.plain(1).result(timeout=5) == 2  # the lane is free again


def test_an_error_mid_stream_is_raised_at_that_item(producer: ActorHandle) -> None:
    seen = []
    with pytest.raises(ValueError, match="item 3 is bad") as info:
        for item in producer.fails_at(3):
            seen.append(item)
    assert seen == [0, 1, 2]
    assert isinstance(info.value, RemoteError)
    assert "fails_at" in info.value.remote_traceback


def test_items_are_checked_against_the_annotation(producer: ActorHandle) -> None:
    seen = []
    with pytest.raises(TypeError, match=r"returned str: 'two', but its return annotation is int"):
        for item in producer.wrong_type():
            seen.append(item)
    assert seen == [1]


def test_async_generator_async_for_and_mid_stream_error(producer: ActorHandle) -> None:
    async def main() -> tuple[list[int], list[int]]:
        items = [x async for x in producer.acount(50, tag="a1")]
        seen = []
        with pytest.raises(KeyError, match="async failure"):
            async for x in producer.afails():
                seen.append(x)
        return items, seen

    items, seen = asyncio.run(main())
    assert items == list(range(50)) and seen == [1]
    assert list(producer.acount(3, tag="a2")) == [0, 1, 2]  # plain code iterates an async generator too


def test_closing_an_async_generator_cancels_it_where_it_waits(producer: ActorHandle) -> None:
    async def main() -> int:
        stream = producer.astall()
        async for item in stream:
            return item  # leaves the loop: the async generator is closed, and the stream with it
        return -1

    assert asyncio.run(main()) == 0
    _until(lambda: producer.state("astall").result(timeout=5)[1], "the async generator to be closed", timeout=10)


def test_plain_and_streaming_calls_are_not_mixed_up(producer: ActorHandle) -> None:
    with pytest.raises(CallRejected, match="is a generator method, whose items stream"):
        MethodRef(producer, "count", None)(3).result(timeout=5)
    with pytest.raises(CallRejected, match="is no generator method"):
        producer.plain.options(stream=True)(1)
    with pytest.raises(ValueError, match=r"window must be an int in 1\.\.1024"):
        producer.count.options(window=0)
    stream = producer.count(3, tag="twice")
    assert list(stream) == [0, 1, 2]
    with pytest.raises(RuntimeError, match="iterated once"):
        list(stream)


def test_stream_next_checks_what_comes_off_the_wire(producer: ActorHandle) -> None:
    pull = producer.method("__stream_next__")
    with pytest.raises(ValueError, match="call id"):
        pull(b"x" * 200, 0, 4, 0.1).result(timeout=5)
    with pytest.raises(ValueError, match=r"window must be a number in 1\.\.1024"):
        pull(b"x" * 16, 0, 5000, 0.1).result(timeout=5)
    with pytest.raises(ValueError, match="wait_s must be a number"):
        pull(b"x" * 16, 0, 4, 3600).result(timeout=5)
    assert pull(b"x" * 16, 0, 4, 0.1).result(timeout=5) == [[], "unknown"]  # nobody's stream: nothing leaks
    stream = producer.count.options(window=2)(100, tag="credit")
    try:  # (closed even on failure: its producer would hold the actor's only lane)
        assert stream.next(timeout=5) == 0  # the first answer may have brought item 1 too
        with pytest.raises(ValueError, match=r"consumed=50 but only [12] items were delivered"):  # more than received
            pull(bytes.fromhex(stream.call_id), 50, 2, 0.1).result(timeout=5)
    finally:
        stream.close()


def test_a_stream_closed_before_iterating_yields_nothing(producer: ActorHandle) -> None:
    stream = producer.count(10, tag="closed-early")
    stream.close()
    assert list(stream) == []  # closed before iterating: nothing, no error
    assert producer.plain(0).result(timeout=5) == 1  # its producer never ran, or stopped: the lane is free


def test_a_close_that_overtakes_its_stream_opens_it_closed() -> None:
    """The caller's ``__stream_close__`` may reach the actor before the streaming call itself (seen under load):
    the stream must then open closed, or its producer would hold its lane waiting for a caller that is gone."""
    table = StreamTable()
    assert stream_close(table, b"peer", b"c" * 16) is False  # nothing open yet
    other = table.open(b"d" * 16, b"peer")
    stream = table.open(b"c" * 16, b"peer")
    assert stream is not None and other is not None
    assert stream.closed == "its caller closed the stream" and stream.wait_room() is False  # at once, no wait
    assert other.closed is None and table.open(b"c" * 16, b"other-peer").closed is None  # only that caller's call
