"""Decoding a codec body from an untrusted peer: every body is hostile until decoded, and decoding is bounded.

Anything outside the limits (:func:`decode`, sizes in :mod:`transport.protocol`) raises DecodeError.
"""

from __future__ import annotations

import contextlib
import gc
import math
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from itertools import compress
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
    inverse,
)
from transport.protocol import MAX_DEPTH, MAX_EXT_DEPTH, MAX_RANK
from transport.type_registry import from_fields

_NUMPY_DTYPE = re.compile(r"[<>|=]?[biufc][0-9]{1,2}")
_NUMPY_DTYPES: dict[str, np.dtype] = {}  # parsed dtype strings
_MAX_ARRAY_BYTES = 1 << 48  # also for the nonzero dimensions of an empty array
_SCAN_BYTES = 2048  # bodies up to this long get their nesting bounded by one scan of their bytes
# The bytes that can open a nesting level: fixmap, fixarray, array 16/32, map 16/32, and the extension headers.
_LEVEL_HEADERS = bytes(range(0x80, 0xA0)) + b"\xc7\xc8\xc9\xd4\xd5\xd6\xd7\xd8\xdc\xdd\xde\xdf"
_OPENERS = bytes(int(byte in _LEVEL_HEADERS) for byte in range(256))  # a translation table: 1 for those bytes
_EXTENSION_HEADER = re.compile(rb"[\xc7-\xc9\xd4-\xd8]")  # ext 8/16/32 and fixext 1-16: where extensions start
_NEST_TYPES = frozenset({list, dict, tuple})
_NESTS = _NEST_TYPES.__contains__


def nesting_depth(obj: Any, limit: int, opaque: dict[int, int] | None = None) -> int:
    """How deep lists, dicts and tuples nest in ``obj``, or ``limit + 1`` once deeper than ``limit``.

    ``opaque`` maps ``id()`` of objects not to look into (rebuilt registered objects) to their own depth. Walks one
    level at a time with ``gc.get_referents``, so the cost per element is C code, and never recurses.
    """
    deepest = opaque.get(id(obj), 0) if opaque else 0
    level = [obj] if _NESTS(type(obj)) else []
    depth = 0
    while level and depth <= limit:
        depth += 1
        children = gc.get_referents(*level)
        if opaque:
            for key in opaque.keys() & set(map(id, children)):
                deepest = max(deepest, depth + opaque[key])
        if _NEST_TYPES.isdisjoint(set(map(type, children))):
            break  # the common last level (scalars, arrays): cheaper than filtering it
        level = list(compress(children, map(_NESTS, map(type, children))))
    return max(depth, deepest)


def _surely_shallow(body: Buffer, size: int) -> bool:
    """Whether a small body cannot nest deeper than MAX_DEPTH: it has no more bytes that could open a level."""
    return size <= MAX_DEPTH or (size <= _SCAN_BYTES and bytes(body).translate(_OPENERS).count(1) <= MAX_DEPTH)


def _brief(value: Any) -> str:
    """A short description of a hostile value for an error message (never a repr of a large or deep one)."""
    kind = type(value)
    if kind is str or kind is bytes:
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    if kind in SCALARS:
        return repr(value)
    if kind is list or kind is dict or kind is tuple:
        return f"a {kind.__name__} of {len(value)}"
    return kind.__name__


def _numpy_dtype(name: Any) -> np.dtype:
    dtype = _NUMPY_DTYPES.get(name) if type(name) is str else None
    if dtype is None and type(name) is str and _NUMPY_DTYPE.fullmatch(name):
        with contextlib.suppress(TypeError):
            dtype = np.dtype(name)
        if dtype is not None and (dtype.kind not in NUMPY_KINDS or dtype.fields or dtype.subdtype):
            dtype = None
        if dtype is not None:
            _NUMPY_DTYPES[name] = dtype  # a bounded cache: few strings match the pattern
    if dtype is None:
        raise DecodeError(f"an array's dtype must be a bool, integer, float or complex dtype, got {_brief(name)}")
    return dtype


def _torch_dtype(torch: Any, name: Any) -> Any:
    dtype = getattr(torch, name, None) if type(name) is str and name in TORCH_DTYPES else None
    if not isinstance(dtype, torch.dtype):
        raise DecodeError(f"a tensor's dtype must be one of {', '.join(sorted(TORCH_DTYPES))}, got {_brief(name)}")
    return dtype


def _array_fields(state: Any, what: str) -> list[Any]:
    if type(state) is not list or len(state) != 4:
        raise DecodeError(f"{what} state must be [dtype, shape, permutation, data], got {_brief(state)}")
    return state


def _counts(values: Any) -> bool:
    """Whether ``values`` is a list of at most MAX_RANK non-negative ints (bools are not ints here)."""
    if type(values) is not list or len(values) > MAX_RANK:
        return False
    for value in values:
        if type(value) is not int or value < 0:
            return False
    return True


def _dense_shape(shape: Any, perm: Any, itemsize: int) -> tuple[list[int], int]:
    """The shape of the data as stored (``shape`` permuted by ``perm``) and its size in bytes, both checked."""
    if not _counts(shape):
        raise DecodeError(f"a shape must be a list of at most {MAX_RANK} non-negative ints, got {_brief(shape)}")
    nbytes = math.prod(shape) * itemsize  # the data must have exactly this size, so it bounds the shape
    if nbytes == 0 and math.prod(filter(None, shape)) * itemsize > _MAX_ARRAY_BYTES:  # numpy would refuse it
        raise DecodeError(f"shape {shape} is too large")
    if perm is None:
        return shape, nbytes
    if not _counts(perm) or sorted(perm) != list(range(len(shape))):
        raise DecodeError(f"a permutation must list the axes 0..{len(shape) - 1} once each, got {_brief(perm)}")
    return [shape[axis] for axis in perm], nbytes


class _Decoder:
    """One decoding pass over a body and the buffers it references."""

    __slots__ = ("bind", "buffers", "exact", "ext_depth", "keep", "opaque", "used")

    def __init__(self, buffers: Sequence[Buffer], exact: bool, bind: bytes) -> None:
        self.buffers = buffers
        self.bind = bind  # what a sealed pickle must be bound to (transport.sealed_pickle.mac)
        self.used: set[int] | None = None  # buffer indexes referenced so far: each at most once
        self.ext_depth = 0
        self.exact = exact  # measure nesting by walking values (False: a scan of the body's bytes bounded it)
        self.opaque: dict[int, int] | None = None  # id() of each registered object rebuilt -> its state's depth
        self.keep: list[Any] = []  # those objects, alive until the end so that their ids stay theirs

    def unpack(self, payload: Buffer, size: int) -> Any:
        # No string, list or map can be longer than the bytes that would hold it (msgpack's own default, made
        # explicit); msgpack's C unpacker also refuses lists and maps nested more than 1024 deep in one payload.
        # msgpack decodes extension -1 (a timestamp) without ext_hook: as a float, it is a value any peer may send.
        return msgpack.unpackb(
            payload,
            ext_hook=self.ext_hook,
            timestamp=1,
            raw=False,
            strict_map_key=False,
            max_str_len=size,
            max_bin_len=size,
            max_array_len=size,
            max_map_len=size // 2,
            max_ext_len=size,
        )

    def data(self, ref: Any, nbytes: int | None) -> Buffer:
        """The bytes ``ref`` names (inline, a buffer index, or a shared-memory file), checked to be ``nbytes`` long
        (if given) before a file is mapped."""
        kind = type(ref)
        if kind is list and len(ref) == 2 and type(ref[0]) is str and type(ref[1]) is int:
            if nbytes is not None and ref[1] != nbytes:
                raise DecodeError(f"a shared-memory reference of {ref[1]} bytes for {nbytes} bytes of data")
            try:
                return shared_memory.read(ref[0], ref[1])
            except ValueError as exc:
                raise DecodeError(str(exc)) from None
        if kind is bytes:
            raw = ref
        elif kind is int and 0 <= ref < len(self.buffers) and (self.used is None or ref not in self.used):
            self.used = self.used or set()
            self.used.add(ref)
            buffer = self.buffers[ref]
            raw = getattr(buffer, "buffer", buffer)  # zmq.Frame exposes its memory as .buffer
        else:
            raise DecodeError(
                f"body refers to buffer {_brief(ref)} but the message has {len(self.buffers)} buffers "
                f"(each referenced once; {len(self.used or ())} already were)"
            )
        if nbytes is not None and memoryview(raw).nbytes != nbytes:
            raise DecodeError(f"data of {memoryview(raw).nbytes} bytes where the shape needs {nbytes}")
        return raw

    def ext_hook(self, code: int, payload: bytes) -> Any:
        build = _BUILDERS.get(code)
        if build is None:
            raise DecodeError(f"unknown msgpack extension code {code}")
        if self.ext_depth >= MAX_EXT_DEPTH:
            raise DecodeError(f"tuples, arrays and registered objects nest more than {MAX_EXT_DEPTH} deep")
        self.ext_depth += 1
        try:
            state = self.unpack(payload, len(payload))
        finally:
            self.ext_depth -= 1
        return build(self, state)

    def as_tuple(self, state: Any) -> tuple[Any, ...]:
        if type(state) is not list:
            raise DecodeError(f"a tuple's state must be a list, got {_brief(state)}")
        return tuple(state)

    def as_bytes(self, state: Any) -> bytes:
        return bytes(self.data(state, None))

    def array(self, state: Any) -> np.ndarray:
        """A large array shares the received frame's memory, or the sender's shared-memory segment (mapped
        copy-on-write, released to the sender when the last array or tensor using it goes): it is read-only."""
        dtype_name, shape, perm, ref = _array_fields(state, "an array's")
        dtype = _numpy_dtype(dtype_name)
        dense_shape, nbytes = _dense_shape(shape, perm, dtype.itemsize)
        array = np.frombuffer(self.data(ref, nbytes), dtype=dtype)
        if type(ref) is bytes:
            array = array.copy()  # small arrays come back writable
        array = array.reshape(dense_shape)
        return array.transpose(inverse(perm)) if perm else array

    def tensor(self, state: Any) -> Any:
        """A tensor shares memory as :meth:`array` does; one written in place changes its own copy-on-write pages,
        never the sender's."""
        torch = sys.modules.get("torch")
        if torch is None:  # importing torch for a peer would cost seconds and memory, and run its import code
            raise DecodeError(
                "this process has not imported torch; a tensor from the wire does not import it "
                "(import torch in this process first, or send numpy arrays)"
            )
        name, shape, perm, ref = _array_fields(state, "a tensor's")
        dtype = _torch_dtype(torch, name)
        dense_shape, nbytes = _dense_shape(shape, perm, dtype.itemsize)
        raw = self.data(ref, nbytes)
        if nbytes == 0:
            tensor = torch.empty(dense_shape, dtype=dtype)  # no elements: nothing is allocated
        else:
            with warnings.catch_warnings():
                # Frames and shared-memory views are read-only buffers; tensors share them (writes stay private).
                warnings.simplefilter("ignore", UserWarning)
                flat = torch.frombuffer(raw if type(ref) is not bytes else bytearray(raw), dtype=torch.uint8)
            tensor = flat.view(dtype).reshape(dense_shape)
        return tensor.permute(inverse(perm)) if perm else tensor

    def registered(self, state: Any) -> Any:
        if type(state) is not list or len(state) != 2 or type(state[0]) is not str:
            raise DecodeError(f"a registered object's state must be [type name, fields], got {_brief(state)}")
        depth = nesting_depth(state, MAX_DEPTH, self.opaque) if self.exact else 0
        if depth > MAX_DEPTH:
            raise DecodeError(f"the message nests more than {MAX_DEPTH} deep")
        try:
            obj = from_fields(*state)
        except Exception as exc:  # the type's own checks (or its from_state) refused the fields
            raise DecodeError(f"cannot rebuild an object of type {_brief(state[0])}: {exc}") from exc
        if self.exact:
            self.opaque = self.opaque or {}
            self.opaque[id(obj)] = max(depth, self.opaque.get(id(obj), 0))
            self.keep.append(obj)
        return obj

    def size_of(self, ref: Any) -> int:
        """How many bytes ``ref`` names, from what it declares: nothing is mapped or read."""
        kind = type(ref)
        if kind is bytes:
            return len(ref)
        if kind is list and len(ref) == 2 and type(ref[1]) is int:
            return ref[1]
        if kind is int and 0 <= ref < len(self.buffers):
            buffer = self.buffers[ref]
            return memoryview(getattr(buffer, "buffer", buffer)).nbytes
        return 0  # refused by data() below

    def sealed(self, state: Any) -> Any:
        """A sealed pickle: sizes bounded before anything is mapped, MAC checked before a byte is unpickled."""
        if type(state) is not list or len(state) != 3 or type(state[2]) is not list:
            raise sealed_pickle.refuse_malformed(f"its state must be [mac, stream, [buffers]], got {_brief(state)}")
        given, refs = state[0], [state[1], *state[2]]
        names = [ref[0] if type(ref) is list and len(ref) == 2 and type(ref[0]) is str else None for ref in refs]
        if sealed_pickle.unavailable() is None:  # else open_sealed refuses it with the reason, having read nothing
            sealed_pickle.check_size(sum(map(self.size_of, refs)))
            refs = [self.data(ref, None) for ref in refs]
        return sealed_pickle.open_sealed(given, refs, names, self.bind)


_BUILDERS: dict[int, Callable[[_Decoder, Any], Any]] = {
    EXT_BUFFER: _Decoder.as_bytes,
    EXT_NDARRAY: _Decoder.array,
    EXT_TENSOR: _Decoder.tensor,
    EXT_OBJECT: _Decoder.registered,
    EXT_TUPLE: _Decoder.as_tuple,
    EXT_PICKLE: _Decoder.sealed,
}


def decode(body: Buffer, buffers: Sequence[Buffer] = (), *, bind: bytes = b"") -> Any:
    """Decode a body produced by :func:`encode` (with the same ``bind``); raises DecodeError on anything else,
    whatever the bytes.

    Limits: nesting at most ``MAX_DEPTH`` deep, of which ``MAX_EXT_DEPTH`` extension levels (counted as they are
    entered; the total is bounded by a scan of a small body's bytes, else by a walk of the decoded value); strings,
    lists and maps no longer than the bytes that would hold them; arrays and tensors only of plain numeric or bool
    dtypes, with shape, permutation and data size checked against each other before anything is built; each
    out-of-band buffer used once; a tensor only in a process that has already imported torch.
    """
    try:
        size = len(body) if type(body) is bytes else memoryview(body).nbytes
        if size <= MAX_DEPTH and _EXTENSION_HEADER.search(body) is None:
            # The common small call: too short to nest too deep, and no byte that could start an extension, so
            # there is nothing to build or check; msgpack bounds every length by the body's own (its default).
            return msgpack.unpackb(body, raw=False, strict_map_key=False)
        decoder = _Decoder(buffers, not _surely_shallow(body, size), bind)
        value = decoder.unpack(body, size)
        if decoder.exact and nesting_depth(value, MAX_DEPTH, decoder.opaque) > MAX_DEPTH:
            raise DecodeError(f"the message nests more than {MAX_DEPTH} deep")
        return value
    except DecodeError:
        raise
    except msgpack.StackError:
        raise DecodeError(f"the message nests more than {MAX_DEPTH} deep") from None
    except Exception as exc:  # msgpack's own errors, and whatever hostile input made numpy or torch raise
        raise DecodeError(f"malformed message body: {type(exc).__name__}: {exc}") from exc
