"""The frame layout and the asyncio ZeroMQ endpoints."""

from __future__ import annotations

import asyncio

import pytest
import zmq

from transport import frames as wire
from transport.codec import decode, encode
from transport.protocol import VERSION, Kind
from transport.sockets import dealer, router, shared_context
from transport.timeouts import within


def test_pack_unpack_round_trip_with_buffers() -> None:
    payload = encode({"x": b"y" * 100_000})
    frames = wire.pack(Kind.SUBMIT, [b"id", "method"], payload)
    assert len(frames) == 2
    message = wire.unpack(frames, max_header_bytes=1 << 20)
    assert message.kind is Kind.SUBMIT and message.meta == [b"id", "method"]
    assert decode(message.body, message.buffers) == {"x": b"y" * 100_000}
    bare = wire.unpack(wire.pack(Kind.PING, [7]), max_header_bytes=1 << 20)
    assert bare.body is None and bare.meta == [7]


@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        ([], "empty"),
        ([b"XX\x01\x01\x00\x00\x00\x00"], "magic"),
        ([b"MA" + bytes([VERSION + 1, 1]) + b"\x00\x00\x00\x00"], "version"),
        ([b"MA" + bytes([VERSION, 1]) + b"\xff\x00\x00\x00"], "runs past"),
        ([b"MA" + bytes([VERSION, 99]) + b"\x01\x00\x00\x00\x90"], "unknown message kind 99"),
        ([b"MA" + bytes([VERSION, 1]) + b"\x01\x00\x00\x00\x07"], "not a list"),
    ],
)
def test_malformed_frames_are_refused(frames: list[bytes], reason: str) -> None:
    with pytest.raises(wire.FrameError, match=reason):
        wire.unpack(frames, max_header_bytes=1 << 20)


def test_oversized_head_is_refused() -> None:
    frames = wire.pack(Kind.PING, ["x" * 5000])
    with pytest.raises(wire.FrameError, match="exceeds the limit"):
        wire.unpack(frames, max_header_bytes=1000)


def test_router_dealer_exchange_many_messages() -> None:
    async def main() -> list[bytes]:
        context = shared_context()
        got: list[bytes] = []
        done = asyncio.get_running_loop().create_future()
        server = None

        def on_server(frames: list[zmq.Frame]) -> None:
            server.send([frames[0], b"re:" + bytes(frames[1])])

        def on_client(frames: list[zmq.Frame]) -> None:
            got.append(bytes(frames[0]))
            if len(got) == 2000 and not done.done():
                done.set_result(None)

        server, address = router(context, "tcp://127.0.0.1:0", on_server, max_message_bytes=1 << 20)
        server.start()
        client = dealer(context, address, on_client, routing_id=b"client-1")
        client.start()
        for i in range(2000):
            client.send([str(i).encode()])
        await within(done, 20)
        client.close()
        server.close()
        return got

    got = asyncio.run(main())
    assert got == [f"re:{i}".encode() for i in range(2000)]
