"""msgpack codec with out-of-band zero-copy buffers for bytes, numpy arrays and torch CPU tensors.

Decoding, bounded because every body is hostile until decoded, is :mod:`transport.decoder`'s (``decode`` is
re-exported here).
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgpack
import numpy as np

from transport import sealed_pickle, shared_memory
from transport.codec_types import (
    EXT_BUFFER,
    EXT_NDARRAY,
    EXT_OBJECT,
    EXT_PICKLE,
    EXT_TENSOR,
    EXT_TUPLE,
    NUMPY_KINDS,
    SCALARS,
    TORCH_DTYPES,
    Buffer,
    DecodeError,
    UnsupportedTypeError,
)
from transport.decoder import decode, nesting_depth
from transport.protocol import DEFAULT_MAX_FRAMES, MAX_DEPTH, MAX_RANK, OUT_OF_BAND_THRESHOLD
from transport.type_registry import registered_name, to_fields

__all__ = ["Buffer", "DecodeError", "UnsupportedTypeError", "decode", "encode", "encode_shared", "nesting_depth"]

_PACK_BUFFER = 1024
_MAX_BUFFERS = DEFAULT_MAX_FRAMES - 1  # the head frame comes first


def _dense_permutation(strides: Sequence[int]) -> list[int] | None:
    """The axis order that sorts strides from largest to smallest, or None if already in that order."""
    order = sorted(range(len(strides)), key=lambda axis: -strides[axis])
    return None if order == list(range(len(strides))) else order


class _LargeBytes:
    """Marks a large bytes-like payload so that msgpack hands it to ``default`` instead of inlining it."""

    __slots__ = ("view",)

    def __init__(self, data: Buffer) -> None:
        self.view = memoryview(data).cast("B")


class _Encoder:
    """One encoding pass: collects out-of-band buffers while msgpack walks the object."""

    def __init__(self, threshold: int, use_shared_memory: bool, bind: bytes = b"") -> None:
        self.buffers: list[Buffer] = []
        self.bind = bind  # what a sealed pickle's MAC binds it to (transport.sealed_pickle.mac)
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
        if kind in SCALARS:
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
            if type(value) in SCALARS:
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
            if name is not None:  # None: /dev/shm cannot take it now, the socket can
                self.shared.append(name)
                return [name, nbytes]
        if len(self.buffers) == _MAX_BUFFERS:
            raise UnsupportedTypeError(
                f"a message carries at most {_MAX_BUFFERS} bytes objects or arrays of {self.threshold} bytes or more; "
                "send fewer, larger ones (for example np.stack the arrays, or b''.join the bytes)"
            )
        self.buffers.append(raw)
        return len(self.buffers) - 1

    def default(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is tuple:
            return msgpack.ExtType(EXT_TUPLE, self.pack(list(obj)))
        if kind is _LargeBytes:
            return msgpack.ExtType(EXT_BUFFER, self.pack(self.data(obj.view, obj.view.nbytes)))
        if isinstance(obj, np.ndarray):
            problem = _array_problem(obj)
            if problem is None:
                return msgpack.ExtType(EXT_NDARRAY, self.pack(self.array_state(obj)))
            return self.sealed(obj, problem)
        if isinstance(obj, np.generic):
            return obj.item()
        name = registered_name(kind)
        if name is not None:
            return msgpack.ExtType(EXT_OBJECT, self.pack([name, to_fields(obj)]))
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor):
            problem = _tensor_problem(obj)
            if problem is None:
                return msgpack.ExtType(EXT_TENSOR, self.pack(self.tensor_state(obj)))
            return self.sealed(obj, problem)
        if kind in (str, int, float, bool, list, dict):
            raise UnsupportedTypeError(self._unsupported(kind))
        if not isinstance(obj, enum.Enum):
            for base in (str, int, float, list, dict):
                if isinstance(obj, base):  # subclasses such as StrEnum members or defaultdict
                    return base(obj)
        return self.sealed(obj, self._unsupported(kind))

    def sealed(self, obj: Any, problem: str) -> msgpack.ExtType:
        """``obj`` as a sealed pickle (:mod:`transport.sealed_pickle`); ``problem`` says why it has no wire type."""
        try:
            stream, buffers = sealed_pickle.pickled(obj, self.threshold)
        except UnsupportedTypeError as exc:
            raise UnsupportedTypeError(f"{problem}; nor can it travel pickled: {exc}") from exc
        parts = [stream, *buffers]
        refs = [self.data(part, part.nbytes) for part in parts]  # placed first: the MAC binds a segment by name
        mac = sealed_pickle.seal(parts, [ref[0] if type(ref) is list else None for ref in refs], self.bind)
        return msgpack.ExtType(EXT_PICKLE, self.pack([mac, refs[0], refs[1:]]))

    @staticmethod
    def _unsupported(kind: type) -> str:
        return (
            f"cannot send an object of type {kind.__module__}.{kind.__qualname__} as itself: the wire carries None, "
            "bool, int, float, str, bytes, list, tuple, dict, numpy arrays, torch CPU tensors, and dataclasses, "
            "pydantic models and enums registered with transport.register_type"
        )

    def array_state(self, array: np.ndarray) -> list[Any]:
        """``[dtype, shape, permutation, data]``: a transposed (permuted) array is sent as its dense base plus the
        permutation and comes back with the same strides; other non-contiguous arrays are made contiguous first."""
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
        """:meth:`array_state` for a torch CPU tensor."""
        dtype = str(tensor.dtype).removeprefix("torch.")
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
        return [dtype, shape, perm, self.data(raw, nbytes)]


def _array_problem(array: np.ndarray) -> str | None:
    """Why an array has no wire form of its own (it then travels pickled), or None."""
    if array.dtype.kind not in NUMPY_KINDS or array.dtype.fields is not None or array.ndim > MAX_RANK:
        return (
            f"cannot send a numpy array of dtype {array.dtype} with {array.ndim} dimensions as itself: arrays cross "
            f"the wire with bool, integer, float or complex dtypes and at most {MAX_RANK} dimensions"
        )
    return None


def _tensor_problem(tensor: Any) -> str | None:
    """Why a tensor has no wire form of its own (it then travels pickled), or None; CUDA tensors never travel."""
    if tensor.device.type != "cpu":
        raise UnsupportedTypeError(
            f"cannot send a {tensor.device.type} tensor: CUDA tensors never ride the actor transport; "
            "move it to CPU with .cpu() or push weights over torch.distributed"
        )
    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in TORCH_DTYPES or tensor.dim() > MAX_RANK:
        return (
            f"cannot send a tensor of dtype {dtype} with {tensor.dim()} dimensions as itself: tensors cross the "
            f"wire with dtypes {', '.join(sorted(TORCH_DTYPES))} and at most {MAX_RANK} dimensions"
        )
    return None


def _torch() -> Any:
    import torch

    return torch


def _plain(obj: Any, threshold: int, depth: int = 2) -> bool:
    """Whether msgpack packs ``obj`` as it is: scalars and short bytes, in lists and dicts up to ``depth`` deep.

    Most calls carry such values (``[[1, "a"], {"k": 2.0}]``); they skip the encoder's walk.
    """
    kind = type(obj)
    if kind in SCALARS:
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
            if type(key) not in SCALARS or not _plain(value, threshold, depth - 1):
                return False
        return True
    return False


def _pack_plain(obj: Any) -> bytes:
    return msgpack.packb(obj, strict_types=True, use_bin_type=True, buf_size=_PACK_BUFFER)


def _check_depth(obj: Any) -> None:
    """Refuse what every receiver would refuse (transport.decoder), here, where the error can name the value."""
    if nesting_depth(obj, MAX_DEPTH) > MAX_DEPTH:
        raise UnsupportedTypeError(
            f"cannot send a value whose lists, dicts and tuples nest more than {MAX_DEPTH} deep: receivers refuse it"
        )


def encode(obj: Any, *, threshold: int = OUT_OF_BAND_THRESHOLD, bind: bytes = b"") -> tuple[bytes, list[Buffer]]:
    """Encode ``obj`` into a msgpack body and out-of-band buffers; raises UnsupportedTypeError.

    Buffers at least ``threshold`` bytes long are not copied into the body but referenced by index, so ZeroMQ can
    send them with ``copy=False``. Tuples stay tuples; arrays and tensors keep dtype, shape and strides.
    ``bind``: what the MAC of any sealed pickle in it is bound to (e.g. a call's id and direction); :func:`decode`
    must be given the same."""
    if _plain(obj, threshold):
        return _pack_plain(obj), []
    _check_depth(obj)
    encoder = _Encoder(threshold, use_shared_memory=False, bind=bind)
    body = encoder.pack(obj)
    return body, encoder.buffers


def encode_shared(obj: Any, *, bind: bytes = b"") -> tuple[tuple[bytes, list[Buffer]], list[str]]:
    """Like :func:`encode`, but buffers of ``SHM_THRESHOLD`` bytes or more go through shared memory.

    Only for a receiver on this machine. Returns the payload and the names of the segments published; the caller
    hands them to ``shared_memory.unlink`` once the call is settled (what the receiver never took then goes back
    to the pool).
    """
    if _plain(obj, OUT_OF_BAND_THRESHOLD):
        return (_pack_plain(obj), []), []
    _check_depth(obj)
    encoder = _Encoder(OUT_OF_BAND_THRESHOLD, use_shared_memory=True, bind=bind)
    try:
        body = encoder.pack(obj)
    except BaseException:
        shared_memory.unlink(encoder.shared)
        raise
    return (body, encoder.buffers), encoder.shared
