"""The codec: structure, zero-copy buffers, arrays and tensors with their strides, registered types."""

from __future__ import annotations

import dataclasses
import enum
import os
import threading

import numpy as np
import pydantic
import pytest
import torch

from transport import DecodeError, UnsupportedTypeError, decode, encode, register_type, shared_memory
from transport.codec import encode_shared
from transport.protocol import MAX_DEPTH
from transport.session_secret import SECRET_ENV


@register_type
@dataclasses.dataclass
class Sample:
    tokens: list[int]
    reward: float


@register_type
class Config(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, arbitrary_types_allowed=True)
    lr: float
    weights: np.ndarray | None = None


@register_type
class Mode(enum.Enum):
    TRAIN = 1
    EVAL = 2


def roundtrip(obj: object) -> object:
    body, buffers = encode(obj)
    return decode(body, buffers)


def test_plain_structure_and_tuples() -> None:
    value = {"a": [1, 2.5, None, True], "b": (1, (2, "x")), 3: b"raw", "s": "ü"}
    assert roundtrip(value) == value
    assert isinstance(roundtrip((1, 2)), tuple)


def test_large_bytes_travel_out_of_band() -> None:
    payload = os.urandom(200_000)
    body, buffers = encode({"blob": payload, "small": b"x"})
    assert len(body) < 1000 and len(buffers) == 1
    assert decode(body, buffers) == {"blob": payload, "small": b"x"}


@pytest.mark.parametrize("dtype", ["uint8", "int64", "float16", "float32", "complex64", "bool"])
def test_numpy_arrays_keep_dtype_and_shape(dtype: str) -> None:
    array = (np.arange(60_000) % 7).astype(dtype).reshape(200, 300)
    out = roundtrip(array)
    assert out.dtype == array.dtype and out.shape == array.shape and np.array_equal(out, array)


def test_numpy_transposed_keeps_strides_and_sliced_is_made_contiguous() -> None:
    base = np.arange(24.0).reshape(2, 3, 4)
    permuted = base.transpose(2, 0, 1)
    out = roundtrip(permuted)
    assert out.strides == permuted.strides and np.array_equal(out, permuted)
    sliced = np.arange(100.0).reshape(10, 10)[::2, 1::3]
    out = roundtrip(sliced)
    assert np.array_equal(out, sliced) and out.flags.c_contiguous
    assert roundtrip(np.float32(2.5)) == 2.5
    assert roundtrip(np.zeros((0, 3))).shape == (0, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.float16])
def test_torch_tensors_keep_dtype_shape_strides(dtype: torch.dtype) -> None:
    tensor = (torch.arange(40_000) % 5).to(dtype).reshape(200, 200).t()
    out = roundtrip(tensor)
    assert out.dtype == dtype and out.shape == tensor.shape and out.stride() == tensor.stride()
    assert torch.equal(out, tensor)
    scalar = roundtrip(torch.tensor(3.5, dtype=dtype))
    assert scalar.shape == () and scalar.dtype == dtype
    odd = torch.arange(100, dtype=torch.float32).reshape(10, 10)[::3, ::2]
    assert torch.equal(roundtrip(odd), odd)


def test_tensor_requiring_grad_is_detached_and_non_cpu_is_refused() -> None:
    weights = torch.ones(3, requires_grad=True)
    assert not roundtrip(weights).requires_grad

    with pytest.raises(UnsupportedTypeError, match="never ride the actor transport"):
        encode(torch.empty(1, device="meta"))


def test_registered_dataclass_pydantic_and_enum() -> None:
    config = Config(lr=0.1, weights=np.ones(3))
    out = roundtrip([Sample([1, 2], 0.5), config, Mode.EVAL])
    assert out[0] == Sample([1, 2], 0.5)
    assert out[1].lr == 0.1 and np.array_equal(out[1].weights, np.ones(3))
    assert out[2] is Mode.EVAL


def test_unregistered_and_unsupported_types_give_clear_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a session secret nothing travels pickled (tests/transport/test_sealed_pickle.py: with one)."""
    monkeypatch.delenv(SECRET_ENV, raising=False)

    @dataclasses.dataclass
    class Unregistered:
        x: int

    with pytest.raises(UnsupportedTypeError, match="register"):
        encode(Unregistered(1))
    with pytest.raises(UnsupportedTypeError, match=r"_thread\.lock"):
        encode({"lock": threading.Lock()})
    with pytest.raises(UnsupportedTypeError, match=r"dtype object.*no session secret"):
        encode(np.array([object()]))


def test_malformed_bodies_raise_decode_error() -> None:
    body, _ = encode(np.zeros(100_000, np.uint8))
    with pytest.raises(DecodeError, match="buffer"):
        decode(body, [])
    with pytest.raises(DecodeError):
        decode(b"\xc1\xc1\xc1")


def test_shared_memory_path_maps_and_takes_the_buffer() -> None:
    array = np.arange(4 << 20, dtype=np.uint8)
    (body, buffers), names = encode_shared({"a": array})
    assert buffers == [] and len(names) == 1
    assert (shared_memory.SHM_DIR / names[0]).exists()
    out = decode(body, buffers)["a"]
    assert np.array_equal(out, array) and not out.flags.writeable
    assert not (shared_memory.SHM_DIR / names[0]).exists()  # the reader took it (renamed it to its own)
    with pytest.raises(DecodeError, match="gone"):
        decode(body, buffers)
    with pytest.raises(ValueError, match="invalid shared-memory reference"):
        shared_memory.read("../../etc/passwd", 10)


def test_a_value_nested_deeper_than_receivers_accept_is_refused_when_sent() -> None:
    value: list = []
    for _ in range(MAX_DEPTH):
        value = [value]
    with pytest.raises(UnsupportedTypeError, match=f"nest more than {MAX_DEPTH} deep"):
        encode(value)
    assert decode(*encode(value[0])) == value[0]  # one level less goes through
