"""A bare DEALER socket speaking the wire protocol, for tests that need to misbehave on purpose."""

from __future__ import annotations

import time
from typing import Any

import zmq

from runtime.core.call_ids import new_call_id
from runtime.core.outcome import arguments_bind, result_bind
from transport import frames as wire
from transport.codec import decode, encode
from transport.messages import Ack, Result, Submit
from transport.protocol import Kind
from transport.sockets import shared_context


class RawClient:
    """Blocking client: build frames by hand, send them as often as you like, read replies."""

    def __init__(self, endpoint: str) -> None:
        self.socket = shared_context().socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)

    def submit_frames(
        self, method: str, *args: Any, call_id: bytes | None = None, acks: list[bytes] | None = None, **kwargs: Any
    ) -> tuple[bytes, list[Any]]:
        call_id = call_id or new_call_id()  # ids carry the time they were made: actors refuse others
        payload = encode([list(args), kwargs], bind=arguments_bind(call_id))  # as runtime.caller.handle seals pickles
        return call_id, Submit(call_id, method, None, None, None, acks or [], False).pack(payload)

    @staticmethod
    def pack_submit(meta: list[Any], *args: Any, **kwargs: Any) -> list[Any]:
        """SUBMIT frames with a header of your own making (see transport.messages.Submit for the fields)."""
        return wire.pack(Kind.SUBMIT, meta, encode([list(args), kwargs]))

    def send(self, frames: list[Any]) -> None:
        self.socket.send_multipart(frames)

    def recv(self, timeout_s: float = 10.0) -> wire.Message:
        if not self.socket.poll(int(timeout_s * 1000)):
            raise TimeoutError(f"no reply within {timeout_s} s")
        return wire.unpack(self.socket.recv_multipart(), max_header_bytes=1 << 30)

    def result(self, message: wire.Message) -> Any:
        assert message.kind is Kind.RESULT, message
        head = Result.parse(message.meta)  # a value is bound to its call (runtime.core.outcome.decode_result)
        return head.ok, decode(message.body, message.buffers, bind=result_bind(head.call_id) if head.ok else b"")

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        call_id, frames = self.submit_frames(method, *args, **kwargs)
        self.send(frames)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            message = self.recv()
            if message.kind is Kind.RESULT and Result.parse(message.meta).call_id == call_id:
                ok, value = self.result(message)
                self.send(Ack([call_id]).pack())
                if not ok:
                    raise RuntimeError(value)
                return value
        raise TimeoutError(method)

    def close(self) -> None:
        self.socket.close(linger=0)
