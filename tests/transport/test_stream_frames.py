"""The byte-stream framing of same-host direct links: DirectStream writes, StreamReader reads, over real socketpairs.

Covers what a stream does to a message layer: messages split across reads, many messages in one read, frames
larger than the read buffer, a peer that breaks the limits, a stream that ends mid-message, and a writer whose
socket is full (partial writes, then flushes, in order).
"""

from __future__ import annotations

import array
import socket
import struct
import time
from collections.abc import Iterator

import pytest

from transport.direct_stream import DirectStream
from transport.stream_frames import COPY_BELOW, StreamError, StreamReader, head

MAX_BYTES = 8 << 20


@pytest.fixture
def ends() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    b.setblocking(False)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def encode(frames: list[bytes]) -> bytes:
    return head([memoryview(frame) for frame in frames]) + b"".join(frames)


def read_all(reader: StreamReader, sock: socket.socket, count: int, timeout_s: float = 10.0) -> list[list[bytes]]:
    """``count`` messages off ``sock``, as bytes."""
    got: list[list[bytes]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} messages came"
        messages, still_open = reader.read(sock, 64)
        got.extend([bytes(frame) for frame in message] for message in messages)
        assert still_open or len(got) >= count, "the stream ended early"
        if not messages:
            time.sleep(0.001)
    return got


def reader(**limits: int) -> StreamReader:
    return StreamReader(max_frames=limits.pop("max_frames", 8), max_message_bytes=MAX_BYTES, **limits)


def test_frames_of_every_size_arrive_whole_and_in_order(ends: tuple[socket.socket, socket.socket]) -> None:
    a, b = ends
    writer = DirectStream(a, peer=None, max_frames=8, max_message_bytes=None, max_queued=None)
    messages = [
        [b""],
        [b"x"],
        [b"a" * (COPY_BELOW - 1), b"b" * COPY_BELOW],  # either side of the copy threshold
        [bytes(range(256)) * (3 * 4096)],  # 3 MiB: larger than the reader's buffer, read in place
        [b"head", b"", b"tail"],
    ]
    for message in messages:
        assert writer.write(message)[0] is not None  # what the socket cannot hold yet waits, in order
    got: list[list[bytes]] = []
    r = reader()
    deadline = time.monotonic() + 10
    while len(got) < len(messages):
        assert time.monotonic() < deadline
        writer.flush()
        batch, still_open = r.read(b, 64)
        assert still_open
        got.extend([bytes(frame) for frame in message] for message in batch)
    assert got == messages


def test_typed_arrays_go_as_their_bytes(ends: tuple[socket.socket, socket.socket]) -> None:
    a, b = ends
    writer = DirectStream(a, peer=None, max_frames=8, max_message_bytes=None, max_queued=None)
    numbers = array.array("i", range(1000))
    assert writer.write([numbers]) == (True, 4 + 8 + 4000)
    assert read_all(reader(), b, 1) == [[numbers.tobytes()]]


def test_a_message_split_into_single_bytes_comes_out_once(ends: tuple[socket.socket, socket.socket]) -> None:
    a, b = ends
    wire = encode([b"first", b"y" * (COPY_BELOW + 10)])
    r = reader()
    got: list[list[bytes]] = []
    for index in range(len(wire)):
        a.sendall(wire[index : index + 1])
        messages, still_open = r.read(b, 64)
        assert still_open
        got.extend([bytes(frame) for frame in message] for message in messages)
        assert len(got) == (1 if index == len(wire) - 1 else 0), f"a message came out after {index + 1} bytes"
    assert got == [[b"first", b"y" * (COPY_BELOW + 10)]]


def test_many_messages_in_one_read_are_all_returned_in_order(ends: tuple[socket.socket, socket.socket]) -> None:
    a, b = ends
    a.sendall(b"".join(encode([b"%d" % i]) for i in range(1000)))
    r = reader()
    first, _ = r.read(b, 10)
    assert len(first) >= 10  # every message parsed from what was read comes back, none waits unannounced
    rest = read_all(r, b, 1000 - len(first))
    assert [bytes(m[0]) for m in first] + [m[0] for m in rest] == [b"%d" % i for i in range(1000)]


class CountingSocket:
    """A socket whose reads are counted."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.reads = sock, 0

    def recv_into(self, buffer: memoryview) -> int:
        self.reads += 1
        return self.sock.recv_into(buffer)


def test_a_read_that_empties_the_socket_asks_it_once(ends: tuple[socket.socket, socket.socket]) -> None:
    a, b = ends
    a.sendall(encode([b"one", b"two"]) + encode([b"three"]))
    counting = CountingSocket(b)
    messages, still_open = reader().read(counting, 64)  # type: ignore[arg-type]
    assert [[bytes(frame) for frame in message] for message in messages] == [[b"one", b"two"], [b"three"]]
    assert still_open and counting.reads == 1  # a short read: the socket had no more, a second recv would fail


@pytest.mark.parametrize(
    "wire, complaint",
    [
        (struct.pack("<I", 0), "0 frames"),
        (struct.pack("<I", 9), "9 frames"),
        (struct.pack("<I", 0xFFFFFFFF), "4294967295 frames"),
        (struct.pack("<IQ", 1, MAX_BYTES + 1), "exceeds the limit"),
        (struct.pack("<I2Q", 2, 1 << 62, 1 << 62), "exceeds the limit"),
    ],
    ids=["no-frames", "too-many-frames", "huge-count", "too-large", "sizes-that-overflow"],
)
def test_a_head_past_the_limits_is_refused_before_its_frames_come(
    ends: tuple[socket.socket, socket.socket], wire: bytes, complaint: str
) -> None:
    a, b = ends
    a.sendall(wire)  # the head alone: the reader must not wait for (or allocate) the frames it announces
    with pytest.raises(StreamError, match=complaint):
        read_all(reader(), b, 1, timeout_s=2.0)


def test_the_first_message_has_its_own_bound(ends: tuple[socket.socket, socket.socket]) -> None:
    a, b = ends
    a.sendall(encode([b"h" * 100]) + encode([b"big" * 1000]))  # hello-sized, then larger: both taken
    assert read_all(reader(first_message_bytes=100), b, 2) == [[b"h" * 100], [b"big" * 1000]]
    c, d = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with c, d:
        d.setblocking(False)
        c.sendall(encode([b"h" * 101]))
        with pytest.raises(StreamError, match="101 bytes exceeds the limit of 100"):
            read_all(reader(first_message_bytes=100), d, 1, timeout_s=2.0)


def test_a_stream_that_ends_mid_message_reports_its_end(ends: tuple[socket.socket, socket.socket]) -> None:
    a, b = ends
    wire = encode([b"whole"]) + encode([b"z" * (2 * COPY_BELOW)])
    a.sendall(wire[: len(wire) - 5])
    a.close()
    r = reader()
    messages, still_open = r.read(b, 64)
    while still_open:
        more, still_open = r.read(b, 64)
        messages += more
    assert [[bytes(f) for f in m] for m in messages] == [[b"whole"]]  # the cut message never comes out


def test_a_full_socket_queues_in_order_and_flush_sends_the_rest(ends: tuple[socket.socket, socket.socket]) -> None:
    a, b = ends
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    writer = DirectStream(a, peer=None, max_frames=8, max_message_bytes=None, max_queued=None)
    payloads = [b"%06d" % i + b"." * 2000 for i in range(400)]
    outcomes = [writer.write([payload])[0] for payload in payloads]
    assert False in outcomes and writer.backlogged, "the socket never filled: the test proves nothing"
    assert None not in outcomes  # no bound: nothing dropped
    r = reader()
    got: list[list[bytes]] = []
    deadline = time.monotonic() + 10
    while len(got) < len(payloads):
        assert time.monotonic() < deadline
        messages, _ = r.read(b, 64)
        got.extend([bytes(f) for f in m] for m in messages)
        writer.flush()
    assert got == [[payload] for payload in payloads]
    assert not writer.backlogged


def test_past_max_queued_a_write_is_dropped_and_says_so(ends: tuple[socket.socket, socket.socket]) -> None:
    a, _ = ends
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    writer = DirectStream(a, peer=None, max_frames=8, max_message_bytes=None, max_queued=3)
    outcomes = []
    while len(outcomes) < 1000 and (not outcomes or outcomes[-1] is not None):
        outcomes.append(writer.write([b"." * 1000])[0])
    assert outcomes[-1] is None, "a reader that never reads must not make the writer queue without bound"
    assert outcomes.count(False) == 3  # the message that first waited, and two more that queued behind it


def test_writing_to_a_closed_link_is_an_error_not_a_signal(ends: tuple[socket.socket, socket.socket]) -> None:
    a, b = ends
    writer = DirectStream(a, peer=None, max_frames=8, max_message_bytes=None, max_queued=None)
    b.close()
    with pytest.raises(OSError):
        for _ in range(3):
            writer.write([b"anyone there?"])
