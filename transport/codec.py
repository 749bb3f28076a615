"""msgpack codec with out-of-band zero-copy buffers for bytes, numpy arrays and torch CPU tensors.

``encode(obj)`` gives a msgpack body and a list of buffers; buffers at least ``OUT_OF_BAND_THRESHOLD`` bytes
long are not copied into the body but referenced by index, so ZeroMQ can send them with ``copy=False``.
Arrays and tensors keep dtype, shape and strides: a transposed (permuted) array is sent as its dense base plus
the permutation and comes back with the same strides; other non-contiguous arrays are made contiguous first.
Tuples stay tuples. Large arrays decoded from received frames share the frame's memory (read-only for numpy).
"""

from __future__ import annotations

import enum
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgpack
import numpy as np

from transport import shared_memory
from transport.protocol import OUT_OF_BAND_THRESHOLD
from transport.type_registry import from_fields, registered_name, to_fields

_EXT_BUFFER = 1
_EXT_NDARRAY = 2
_EXT_TENSOR = 3
_EXT_OBJECT = 4
_EXT_TUPLE = 5

Buffer = Any  # anything with the buffer protocol: bytes, memoryview, zmq.Frame

_SCALARS = frozenset({int, float, str, bool, type(None)})  # never hold out-of-band data
_PACK_BUFFER = 1024


class UnsupportedTypeError(TypeError):
    """An object of a type the codec cannot carry."""


class DecodeError(ValueError):
    """A body or buffer list that is not a valid encoding."""


def _dense_permutation(strides: Sequence[int]) -> list[int] | None:
    """The axis order that sorts strides from largest to smallest, or None if already in that order."""
    order = sorted(range(len(strides)), key=lambda axis: -strides[axis])
    return None if order == list(range(len(strides))) else order


def _inverse(perm: list[int]) -> list[int]:
    inverse = [0] * len(perm)
    for position, axis in enumerate(perm):
        inverse[axis] = position
    return inverse


class _LargeBytes:
    """Marks a large bytes-like payload so that msgpack hands it to ``default`` instead of inlining it."""

    __slots__ = ("view",)

    def __init__(self, data: Buffer) -> None:
        self.view = memoryview(data).cast("B")


class _Encoder:
    """One encoding pass: collects out-of-band buffers while msgpack walks the object."""

    def __init__(self, threshold: int, use_shared_memory: bool) -> None:
        self.buffers: list[Buffer] = []
        self.threshold = threshold
        self.use_shared_memory = use_shared_memory
        self.shared: list[str] = []  # names of shared-memory files written

    def pack(self, obj: Any) -> bytes:
        # A small initial buffer: msgpack's default (1 MiB) costs an mmap and page faults on every nested
        # pack (tuples, arrays, registered objects), about 15 us each.
        return msgpack.packb(
            self.lift(obj), default=self.default, strict_types=True, use_bin_type=True, buf_size=_PACK_BUFFER
        )

    def lift(self, obj: Any) -> Any:
        """Wrap large ``bytes`` in memoryviews so that ``default`` sees them (msgpack packs bytes itself)."""
        kind = type(obj)
        if kind in _SCALARS:
            return obj
        if kind is bytes or kind is bytearray or kind is memoryview:
            return _LargeBytes(obj) if memoryview(obj).nbytes >= self.threshold else obj
        if kind is list or kind is tuple:
            lifted = self._lift_entries(enumerate(obj), obj, list)
            if lifted is None:
                return obj
            return tuple(lifted) if kind is tuple else lifted
        if kind is dict:
            return self._lift_entries(obj.items(), obj, dict) or obj
        return obj

    def _lift_entries(self, entries: Iterable[tuple[Any, Any]], container: Any, copy: Callable[[Any], Any]) -> Any:
        """A lifted copy of ``container`` (made by ``copy``) if lifting changed any of its entries, else None."""
        changed = None
        for key, value in entries:
            if type(value) in _SCALARS:
                continue
            new = self.lift(value)
            if new is not value:
                if changed is None:
                    changed = copy(container)
                changed[key] = new
        return changed

    def data(self, raw: Buffer, nbytes: int) -> Any:
        """Inline small payloads; reference large ones by buffer index, or by shared-memory name."""
        if nbytes < self.threshold:
            return bytes(raw)
        if self.use_shared_memory and nbytes >= shared_memory.SHM_THRESHOLD:
            name = shared_memory.write(memoryview(raw))
            self.shared.append(name)
            return [name, nbytes]
        self.buffers.append(raw)
        return len(self.buffers) - 1

    def default(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is tuple:
            return msgpack.ExtType(_EXT_TUPLE, self.pack(list(obj)))
        if kind is _LargeBytes:
            return msgpack.ExtType(_EXT_BUFFER, self.pack(self.data(obj.view, obj.view.nbytes)))
        if isinstance(obj, np.ndarray):
            return msgpack.ExtType(_EXT_NDARRAY, self.pack(self.array_state(obj)))
        if isinstance(obj, np.generic):
            return obj.item()
        name = registered_name(kind)
        if name is not None:
            return msgpack.ExtType(_EXT_OBJECT, self.pack([name, to_fields(obj)]))
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor):
            return msgpack.ExtType(_EXT_TENSOR, self.pack(self.tensor_state(obj)))
        if isinstance(obj, enum.Enum) or kind in (str, int, float, bool, list, dict):
            raise UnsupportedTypeError(self._unsupported(kind, registrable=isinstance(obj, enum.Enum)))
        for base in (str, int, float, list, dict):
            if isinstance(obj, base):  # subclasses such as StrEnum members or defaultdict
                return base(obj)
        raise UnsupportedTypeError(self._unsupported(kind, registrable=False))

    @staticmethod
    def _unsupported(kind: type, *, registrable: bool) -> str:
        hint = (
            "register it with transport.register_type (dataclasses, pydantic models and enums)"
            if registrable
            else "send None, bool, int, float, str, bytes, list, tuple, dict, numpy arrays, torch CPU tensors, "
            "or a dataclass/pydantic model/enum registered with transport.register_type"
        )
        return f"cannot send an object of type {kind.__module__}.{kind.__qualname__}: {hint}"

    def array_state(self, array: np.ndarray) -> list[Any]:
        if array.dtype.hasobject:
            raise UnsupportedTypeError("cannot send a numpy array of dtype=object: convert it to a list")
        shape, perm = list(array.shape), None
        if not array.flags.c_contiguous:
            perm = _dense_permutation(array.strides)
            dense = array.transpose(perm) if perm else array
            if not dense.flags.c_contiguous:
                perm, dense = None, np.ascontiguousarray(array)
            array = dense
        raw = memoryview(array.reshape(-1)).cast("B") if array.size else b""
        return [array.dtype.str, shape, perm, self.data(raw, array.nbytes)]

    def tensor_state(self, tensor: Any) -> list[Any]:
        if tensor.device.type != "cpu":
            raise UnsupportedTypeError(
                f"cannot send a {tensor.device.type} tensor: CUDA tensors never ride the actor transport; "
                "move it to CPU with .cpu() or push weights over torch.distributed"
            )
        tensor = tensor.detach()
        shape, perm = list(tensor.shape), None
        if not tensor.is_contiguous():
            perm = _dense_permutation(tensor.stride())
            dense = tensor.permute(perm) if perm else tensor
            if not dense.is_contiguous():
                perm, dense = None, tensor.contiguous()
            tensor = dense
        nbytes = tensor.numel() * tensor.element_size()
        raw = tensor.reshape(-1).view(_torch().uint8).numpy().data if nbytes else b""
        return [str(tensor.dtype).removeprefix("torch."), shape, perm, self.data(raw, nbytes)]


def _torch() -> Any:
    import torch

    return torch


class _Decoder:
    """One decoding pass over a body and the buffers it references."""

    def __init__(self, buffers: Sequence[Buffer]) -> None:
        self.buffers = buffers

    def unpack(self, body: Buffer) -> Any:
        return msgpack.unpackb(body, ext_hook=self.ext_hook, raw=False, strict_map_key=False)

    def data(self, ref: Any) -> Any:
        if isinstance(ref, bytes):
            return ref
        if type(ref) is list and len(ref) == 2:
            return shared_memory.read(*ref)
        if type(ref) is not int or not 0 <= ref < len(self.buffers):
            raise DecodeError(f"body refers to buffer {ref!r} but the message has {len(self.buffers)} buffers")
        buffer = self.buffers[ref]
        return getattr(buffer, "buffer", buffer)  # zmq.Frame exposes its memory as .buffer

    def ext_hook(self, code: int, payload: bytes) -> Any:
        state = self.unpack(payload)
        if code == _EXT_TUPLE:
            return tuple(state)
        if code == _EXT_BUFFER:
            return bytes(self.data(state))
        if code == _EXT_NDARRAY:
            return self.array(*state)
        if code == _EXT_TENSOR:
            return self.tensor(*state)
        if code == _EXT_OBJECT:
            return from_fields(*state)
        raise DecodeError(f"unknown msgpack extension code {code}")

    def array(self, dtype: str, shape: list[int], perm: list[int] | None, ref: Any) -> np.ndarray:
        raw = self.data(ref)
        array = np.frombuffer(raw, dtype=np.dtype(dtype))
        if isinstance(ref, bytes):
            array = array.copy()  # small arrays come back writable
        dense_shape = [shape[axis] for axis in perm] if perm else shape
        array = array.reshape(dense_shape)
        return array.transpose(_inverse(perm)) if perm else array

    def tensor(self, dtype: str, shape: list[int], perm: list[int] | None, ref: Any) -> Any:
        torch = _torch()
        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype):
            raise DecodeError(f"unknown torch dtype {dtype!r}")
        dense_shape = [shape[axis] for axis in perm] if perm else shape
        raw = self.data(ref)
        if len(raw) == 0:
            tensor = torch.empty(dense_shape, dtype=torch_dtype)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # frames are read-only buffers; tensors share them
                flat = torch.frombuffer(raw if not isinstance(ref, bytes) else bytearray(raw), dtype=torch.uint8)
            tensor = flat.view(torch_dtype).reshape(dense_shape)
        return tensor.permute(_inverse(perm)) if perm else tensor


def _plain(obj: Any, threshold: int, depth: int = 2) -> bool:
    """Whether msgpack packs ``obj`` as it is: scalars and short bytes, in lists and dicts up to ``depth`` deep.

    Most calls carry such values (``[[1, "a"], {"k": 2.0}]``); they skip the encoder's walk.
    """
    kind = type(obj)
    if kind in _SCALARS:
        return True
    if kind is bytes:
        return len(obj) < threshold
    if depth == 0:
        return False
    if kind is list:
        for item in obj:
            if not _plain(item, threshold, depth - 1):
                return False
        return True
    if kind is dict:
        for key, value in obj.items():
            if type(key) not in _SCALARS or not _plain(value, threshold, depth - 1):
                return False
        return True
    return False


def _pack_plain(obj: Any) -> bytes:
    return msgpack.packb(obj, strict_types=True, use_bin_type=True, buf_size=_PACK_BUFFER)


def encode(obj: Any, *, threshold: int = OUT_OF_BAND_THRESHOLD) -> tuple[bytes, list[Buffer]]:
    """Encode ``obj`` into a msgpack body and out-of-band buffers; raises UnsupportedTypeError."""
    if _plain(obj, threshold):
        return _pack_plain(obj), []
    encoder = _Encoder(threshold, use_shared_memory=False)
    body = encoder.pack(obj)
    return body, encoder.buffers


def encode_shared(obj: Any) -> tuple[tuple[bytes, list[Buffer]], list[str]]:
    """Like :func:`encode`, but buffers of ``SHM_THRESHOLD`` bytes or more go through shared memory.

    Only for a receiver on this machine. Returns the payload and the names of the files written; the caller
    unlinks them (``shared_memory.unlink``) once the message is surely consumed or abandoned.
    """
    if _plain(obj, OUT_OF_BAND_THRESHOLD):
        return (_pack_plain(obj), []), []
    encoder = _Encoder(OUT_OF_BAND_THRESHOLD, use_shared_memory=True)
    try:
        body = encoder.pack(obj)
    except BaseException:
        shared_memory.unlink(encoder.shared)
        raise
    return (body, encoder.buffers), encoder.shared


def decode(body: Buffer, buffers: Sequence[Buffer] = ()) -> Any:
    """Decode a body produced by :func:`encode`; raises DecodeError on malformed input."""
    try:
        return _Decoder(buffers).unpack(body)
    except (DecodeError, UnsupportedTypeError):
        raise
    except TypeError as exc:
        if "unregistered type" in str(exc):
            raise
        raise DecodeError(f"malformed message body: {exc}") from exc
    except (ValueError, msgpack.UnpackException, IndexError, KeyError, RuntimeError) as exc:
        raise DecodeError(f"malformed message body: {type(exc).__name__}: {exc}") from exc
