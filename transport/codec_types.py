"""What the codec's two directions share: its msgpack extension codes, its errors, and the values it carries.

The encoder (:mod:`transport.codec`) and the decoder (:mod:`transport.decoder`) agree on these; nothing else
should need them.
"""

from __future__ import annotations

from typing import Any

EXT_BUFFER = 1
EXT_NDARRAY = 2
EXT_TENSOR = 3
EXT_OBJECT = 4
EXT_TUPLE = 5
EXT_PICKLE = 6  # a sealed pickle (transport.sealed_pickle): [mac, stream, [buffers]]

Buffer = Any  # anything with the buffer protocol: bytes, memoryview, zmq.Frame

SCALARS = frozenset({int, float, str, bool, type(None)})  # never hold out-of-band data
NUMPY_KINDS = "biufc"  # bool, signed and unsigned ints, floats, complex
TORCH_DTYPES = frozenset(
    {"bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16", "bfloat16"}
    | {"float32", "float64", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"}
)


class UnsupportedTypeError(TypeError):
    """An object of a type the codec cannot carry."""


class DecodeError(ValueError):
    """A body or buffer list that is not a valid encoding."""


def inverse(perm: list[int]) -> list[int]:
    inverse = [0] * len(perm)
    for position, axis in enumerate(perm):
        inverse[axis] = position
    return inverse
