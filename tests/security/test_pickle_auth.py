"""Sealed pickles from hostile peers: nothing is unpickled unless its MAC is this session's (transport.sealed_pickle).

Every case carries a payload whose ``__reduce__`` writes a file when unpickled, so "never unpickled" is observed,
not assumed; the control case (the right secret) shows the payload does write it. Cases: a forged MAC, a stream
or buffer truncated or altered after sealing, a pickle replayed to a process of another launch (another secret),
an oversized one (refused from its declared size, before anything is read), a process with no secret, pickles
turned off; then the same against a live actor over the wire, which counts what it refused.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from raw_client import RawClient

from runtime import ActorHandle
from runtime.core.call_ids import new_call_id
from runtime.core.outcome import arguments_bind, result_bind
from transport import sealed_pickle, session_secret, shared_memory
from transport.codec import encode, encode_shared
from transport.codec_types import EXT_PICKLE, DecodeError
from transport.decoder import decode
from transport.messages import Submit
from transport.sealed_pickle import PickleRefused
from transport.session_secret import SECRET_ENV


class WritesFile:
    """Unpickling it writes ``path``: the proof that a pickle was (or was not) loaded."""

    def __init__(self, path: Path, ballast: np.ndarray | None = None) -> None:
        self.path, self.ballast = path, ballast

    def __reduce__(self) -> Any:
        if self.ballast is None:
            return Path.write_text, (self.path, "unpickled")
        return _write_with_ballast, (self.path, self.ballast)


def _write_with_ballast(path: Path, ballast: np.ndarray) -> int:
    return path.write_text(f"unpickled {ballast.nbytes}")


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "marker"


@pytest.fixture(autouse=True)
def own_secret(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    value = secrets.token_hex(32)
    monkeypatch.setenv(SECRET_ENV, value)
    monkeypatch.delenv(session_secret.PICKLE_ENV, raising=False)
    monkeypatch.delenv(sealed_pickle.MAX_BYTES_ENV, raising=False)
    yield value


def _sealed_state(body: bytes) -> list[Any]:
    """The [mac, stream, refs] of a body that is one sealed pickle."""
    ext = msgpack.unpackb(body, ext_hook=msgpack.ExtType)
    assert ext.code == EXT_PICKLE
    return msgpack.unpackb(ext.data)


def _body(state: list[Any]) -> bytes:
    return msgpack.packb(msgpack.ExtType(EXT_PICKLE, msgpack.packb(state, use_bin_type=True)), use_bin_type=True)


def _refused(reason: str, body: bytes, buffers: list[Any], match: str) -> None:
    before = sealed_pickle.REFUSED[reason]
    with pytest.raises(PickleRefused, match=match):
        decode(body, buffers)
    assert sealed_pickle.REFUSED[reason] == before + 1


def test_the_right_secret_unpickles_the_payload(marker: Path) -> None:
    decode(*encode(WritesFile(marker)))
    assert marker.read_text() == "unpickled"  # the payload works: the refusals below are real


def test_a_forged_mac_is_refused_and_nothing_is_unpickled(marker: Path) -> None:
    mac, stream, refs = _sealed_state(encode(WritesFile(marker))[0])
    for forged in (bytes(32), mac[:-1] + bytes([mac[-1] ^ 1]), mac[:16], b"", "text", None):
        _refused("forged", _body([forged, stream, refs]), [], "MAC is not this session's")
    assert not marker.exists()


def test_a_truncated_or_altered_pickle_is_refused(marker: Path) -> None:
    body, buffers = encode(WritesFile(marker, np.ones(1 << 17, np.uint8)))
    mac, stream, refs = _sealed_state(body)
    assert len(buffers) == 1 and refs == [0]  # the ballast travels out of band
    _refused("forged", _body([mac, stream[:-1], refs]), buffers, "never unpickled")
    _refused("forged", _body([mac, stream, refs]), [bytes(buffers[0])[:-1]], "never unpickled")
    altered = bytearray(buffers[0])
    altered[-1] ^= 1
    _refused("forged", body, [altered], "never unpickled")
    _refused("forged", _body([mac, stream, []]), [], "never unpickled")  # the buffer dropped
    with pytest.raises(DecodeError):  # the body itself cut short: msgpack refuses it
        decode(body[:-3], buffers)
    assert not marker.exists()


def test_a_shared_memory_part_swapped_for_a_frame_of_the_same_bytes_is_refused(marker: Path) -> None:
    """The MAC binds a segment by name (the OS vouches for its bytes); a frame in its place must carry the MAC of
    its bytes, which only the secret's holders can make."""
    ballast = np.ones(4 << 20, np.uint8)
    (body, buffers), names = encode_shared(WritesFile(marker, ballast))
    mac, stream, refs = _sealed_state(body)
    assert buffers == [] and len(names) == 1 and refs == [[names[0], ballast.nbytes]]
    try:
        _refused("forged", _body([mac, stream, [0]]), [ballast.tobytes()], "never unpickled")
        assert not marker.exists()
        decode(body, buffers)  # the segment itself, as sent
        assert marker.read_text() == f"unpickled {ballast.nbytes}"
    finally:
        shared_memory.unlink(names)


def test_a_pickle_bound_to_one_call_is_refused_for_another_or_as_its_result(marker: Path) -> None:
    """runtime.caller.handle binds a call's arguments to its id and direction (runtime.core.outcome.arguments_bind)."""
    first, second = new_call_id(), new_call_id()
    body, buffers = encode(WritesFile(marker), bind=arguments_bind(first))
    _refused("forged", body, buffers, "replayed from another call")  # unbound
    with pytest.raises(PickleRefused):
        decode(body, buffers, bind=arguments_bind(second))
    with pytest.raises(PickleRefused):
        decode(body, buffers, bind=result_bind(first))
    assert not marker.exists()
    decode(body, buffers, bind=arguments_bind(first))
    assert marker.exists()


def test_a_pickle_replayed_to_another_launch_is_refused(marker: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body, buffers = encode(WritesFile(marker))
    monkeypatch.setenv(SECRET_ENV, secrets.token_hex(32))  # a process of another launch or driver tree
    _refused("forged", body, buffers, "another launch or driver tree")
    assert not marker.exists()


def test_an_oversized_pickle_is_refused_from_its_declared_size(marker: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body, buffers = encode(WritesFile(marker, np.ones(1 << 20, np.uint8)))
    monkeypatch.setenv(sealed_pickle.MAX_BYTES_ENV, str(1 << 20))
    _refused("oversized", body, buffers, r"over this process's bound of 1048576 bytes \(MILES_PICKLE_MAX_BYTES")
    mac, stream, _ = _sealed_state(body)
    huge = _body([mac, stream, [["miles-not-a-segment", 1 << 40]]])  # a shared-memory ref is never mapped first
    _refused("oversized", huge, [], "MILES_PICKLE_MAX_BYTES")
    assert not marker.exists()


def test_a_process_without_a_secret_refuses_and_says_how_to_fix_it(
    marker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body, buffers = encode(WritesFile(marker))
    monkeypatch.delenv(SECRET_ENV)
    _refused("no_secret", body, buffers, "holds no session secret.*must be given the same MILES_SESSION_SECRET")
    monkeypatch.setenv(SECRET_ENV, "zz")
    _refused("no_secret", body, buffers, "must be 64 hex digits")
    assert not marker.exists()


def test_pickles_turned_off_are_refused_even_when_authentic(marker: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body, buffers = encode(WritesFile(marker))
    monkeypatch.setenv(session_secret.PICKLE_ENV, "0")
    _refused("disabled", body, buffers, r"MILES_PICKLE=0")
    assert not marker.exists()


def test_malformed_envelopes_are_refused(marker: Path) -> None:
    mac, stream, refs = _sealed_state(encode(WritesFile(marker))[0])
    for state in ([mac, stream], [mac, stream, 0], "x", [mac, stream, refs, 1]):
        _refused("malformed", _body(state), [], "malformed pickled value")
    with pytest.raises(DecodeError, match="buffer"):
        decode(_body([mac, 7, refs]), [])
    assert not marker.exists()


@pytest.mark.processes
def test_a_live_actor_refuses_pickles_sealed_by_another_launch_or_for_another_call(
    target: ActorHandle, marker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The target was spawned by this process, so it holds our secret; a pickle sealed with another never loads."""
    own, raw = os.environ[SECRET_ENV], RawClient(target.endpoint)
    try:
        monkeypatch.setenv(SECRET_ENV, secrets.token_hex(32))
        with pytest.raises(RuntimeError, match="MAC is not this session's"):
            raw.call("keep", WritesFile(marker))
        assert not marker.exists()
        monkeypatch.setenv(SECRET_ENV, own)  # the same payload sealed with the target's secret is unpickled there
        assert raw.call("keep", WritesFile(marker)) == "int"
        assert marker.read_text() == "unpickled"
        assert target.method("__stats__")().result(10)["pickles_refused"]["forged"] == 1
        marker.unlink()
        sealed_for, replayed_as = new_call_id(), new_call_id()  # the arguments of one call, resent as another's
        payload = encode([[WritesFile(marker)], {}], bind=arguments_bind(sealed_for))
        raw.send(Submit(replayed_as, "keep", None, None, None, [], False).pack(payload))
        ok, error = raw.result(raw.recv())
        assert not ok and "replayed from another call" in error["message"] and not marker.exists()
    finally:
        raw.close()
