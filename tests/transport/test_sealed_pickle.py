"""Values with no wire type of their own travel as sealed pickles (transport.sealed_pickle): the envelope, in-process.

The hostile side (forged, replayed, oversized...) is tests/security/test_pickle_auth.py; real actors carrying such
values are tests/runtime/test_pickled_values.py.
"""

from __future__ import annotations

import argparse
import secrets

import msgpack
import numpy as np
import pytest
import torch

from transport import sealed_pickle, session_secret
from transport.codec import encode, encode_shared
from transport.codec_types import EXT_PICKLE, UnsupportedTypeError
from transport.decoder import decode
from transport.protocol import OUT_OF_BAND_THRESHOLD
from transport.session_secret import SECRET_ENV, SessionSecretError


@pytest.fixture(autouse=True)
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    value = secrets.token_hex(32)
    monkeypatch.setenv(SECRET_ENV, value)
    monkeypatch.delenv(session_secret.PICKLE_ENV, raising=False)
    monkeypatch.delenv(sealed_pickle.MAX_BYTES_ENV, raising=False)
    return value


def _square(x: int) -> int:
    return x * x


def test_values_without_a_wire_type_round_trip_pickled() -> None:
    namespace = argparse.Namespace(lr=0.1, layers=[1, 2], nested=argparse.Namespace(seed=3))
    objects = np.array([1, "two", None, {"k": 3}], dtype=object)
    out = decode(*encode({"args": namespace, "fn": _square, "lam": lambda x: x + 1, "objects": objects}))
    assert out["args"] == namespace
    assert out["fn"](4) == 16 and out["lam"](1) == 2
    assert out["objects"].dtype == object and list(out["objects"]) == [1, "two", None, {"k": 3}]


def _extension_codes(body: bytes) -> list[int]:
    """The msgpack extension codes in a body, nested ones included."""
    codes: list[int] = []

    def hook(code: int, payload: bytes) -> None:
        codes.append(code)
        msgpack.unpackb(payload, ext_hook=hook)

    msgpack.unpackb(body, ext_hook=hook)
    return codes


def test_wire_types_never_take_the_pickle_path() -> None:
    body, buffers = encode({"a": np.ones((512, 512), np.float32), "t": torch.ones(3), "b": b"x" * 100_000})
    assert EXT_PICKLE not in _extension_codes(body) and len(buffers) == 2  # the array and the bytes, as before
    assert _extension_codes(encode(argparse.Namespace())[0]) == [EXT_PICKLE]
    out = decode(body, buffers)
    assert out["a"].shape == (512, 512) and out["t"].tolist() == [1.0, 1.0, 1.0]


def test_large_arrays_and_dense_tensors_inside_a_pickle_travel_out_of_band() -> None:
    namespace = argparse.Namespace(array=np.arange(1 << 20, dtype=np.float32), tensor=torch.arange(1 << 20))
    body, buffers = encode(namespace)
    assert len(body) < 2048  # the 4 MiB and 8 MiB stay out of the pickle stream and the msgpack body
    assert sorted(memoryview(b).nbytes for b in buffers) == [4 << 20, 8 << 20]
    out = decode(body, buffers)
    assert np.array_equal(out.array, namespace.array) and torch.equal(out.tensor, namespace.tensor)


def test_tensors_that_are_views_keep_torchs_own_reduction() -> None:
    base = torch.arange(200_000, dtype=torch.float64)
    value = argparse.Namespace(
        view=base[10:], transposed=base.reshape(400, 500).t(), grad=torch.ones(3).requires_grad_()
    )
    out = decode(*encode(value))
    assert torch.equal(out.view, base[10:]) and torch.equal(out.transposed, value.transposed)
    assert out.grad.requires_grad
    loss = torch.ones(3).requires_grad_() * 2  # not a leaf: torch's own reduction, as with Ray
    assert torch.equal(decode(*encode(argparse.Namespace(loss=loss))).loss, loss.detach())


def test_a_pickle_through_shared_memory() -> None:
    value = argparse.Namespace(data=np.ones(4 << 20, np.uint8))
    (body, buffers), names = encode_shared(value)
    assert len(names) == 1 and buffers == []
    assert np.array_equal(decode(body, buffers).data, value.data)


def test_the_mac_covers_every_byte_of_large_buffers_cut_in_pieces() -> None:
    key, names = bytes(32), [None, None]
    data = bytearray(np.random.default_rng(0).integers(0, 255, 3 * sealed_pickle._CHUNK + 5, np.uint8).tobytes())
    seal = sealed_pickle.mac(key, [b"stream", data], names)
    assert sealed_pickle.mac(key, [b"stream", bytes(data)], names) == seal
    data[2 * sealed_pickle._CHUNK + 1] ^= 1  # one bit in the third piece
    assert sealed_pickle.mac(key, [b"stream", data], names) != seal
    moved = sealed_pickle.mac(key, [b"stream" + bytes(data[:1]), data[1:]], names)  # a byte moved between parts
    assert moved != sealed_pickle.mac(key, [b"stream", data], names)


def test_a_part_in_shared_memory_is_bound_by_its_segment_name_and_length() -> None:
    key = bytes(32)
    seal = sealed_pickle.mac(key, [b"stream", b"x" * 100], [None, "seg-a"])
    assert sealed_pickle.mac(key, [b"stream", b"y" * 100], [None, "seg-a"]) == seal  # the OS vouches for the bytes
    assert sealed_pickle.mac(key, [b"stream", b"x" * 100], [None, "seg-b"]) != seal
    assert sealed_pickle.mac(key, [b"stream", b"x" * 101], [None, "seg-a"]) != seal
    assert sealed_pickle.mac(key, [b"stream", b"x" * 100], [None, None]) != seal  # a frame is not a segment


def test_what_cannot_be_pickled_says_so() -> None:
    import threading

    with pytest.raises(UnsupportedTypeError, match=r"_thread\.lock.*cannot be pickled"):
        encode({"lock": threading.Lock()})


def test_a_sender_over_the_size_bound_names_the_limit_and_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sealed_pickle.MAX_BYTES_ENV, "4096")
    with pytest.raises(UnsupportedTypeError, match=r"over the 4096 bytes receivers accept \(MILES_PICKLE_MAX_BYTES"):
        encode(argparse.Namespace(blob=np.zeros(OUT_OF_BAND_THRESHOLD, np.uint8)))


def test_without_a_secret_or_turned_off_the_sender_says_why_and_how(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SECRET_ENV)
    with pytest.raises(UnsupportedTypeError, match=r"argparse\.Namespace as itself.*holds no session secret"):
        encode(argparse.Namespace())
    monkeypatch.setenv(SECRET_ENV, "00" * 32)
    monkeypatch.setenv(session_secret.PICKLE_ENV, "0")
    with pytest.raises(UnsupportedTypeError, match=r"turned off in this process \(MILES_PICKLE=0\)"):
        encode(argparse.Namespace())


def test_a_malformed_secret_is_an_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, "not-hex")
    with pytest.raises(SessionSecretError, match="MILES_SESSION_SECRET must be 64 hex digits"):
        session_secret.current()
    with pytest.raises(UnsupportedTypeError, match="MILES_SESSION_SECRET must be 64 hex digits"):
        encode(argparse.Namespace())


def test_ensure_draws_a_secret_once_and_children_inherit_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime.processes.driver_fork import child_environment

    monkeypatch.delenv(SECRET_ENV)
    drawn = session_secret.ensure()
    assert len(bytes.fromhex(drawn)) == 32 and session_secret.ensure() == drawn
    assert child_environment(None)[SECRET_ENV] == drawn
