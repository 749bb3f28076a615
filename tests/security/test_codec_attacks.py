"""Hostile bodies and frames: decoding either returns a value no larger than its input or raises DecodeError.

The attacks of the security review against the codec and the frame layout: deep nesting (a segfault from 1 KB),
allocation from tiny input (a tensor of 16 MiB from an empty buffer), importing torch for a peer, too many frames.
Thousands of almost-valid bodies are in test_codec_fuzz. Whatever could crash the interpreter runs in a child
process, so that a crash fails the test instead of ending the run.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from codec_samples import ARRAY, BUFFER, OBJECT, SAMPLES, TENSOR, TUPLE, Model, Point, ext, packed, run_child

from transport import DecodeError, FrameError, Kind, UnsupportedTypeError, codec, decode, encode
from transport import frames as wire
from transport.protocol import (
    DEFAULT_MAX_FRAMES,
    MAX_DEPTH,
    MAX_EXT_DEPTH,
    META_MAX_BYTES,
    META_MAX_ITEMS,
    OUT_OF_BAND_THRESHOLD,
)

# --- deep nesting: in a child, so that a segfault fails the test --------------------------------------------------

_DEEP = """
import sys, threading, msgpack
from transport import DecodeError, FrameError, frames
from transport.codec import decode

def nested_ext(code, depth, inner=None):
    body = msgpack.packb(inner)
    for _ in range(depth):
        body = msgpack.packb(msgpack.ExtType(code, b"\\x91" + body))
    return body

def alternating(depth):  # [(([(...)])]) : lists inside tuples inside lists
    body = b"\\xc0"
    for _ in range(depth):
        body = b"\\x91" + msgpack.packb(msgpack.ExtType(5, b"\\x91" + body))
    return body

def objects(depth):  # registered-object states nested in each other
    body = msgpack.packb(None)
    for _ in range(depth):
        body = msgpack.packb(msgpack.ExtType(4, b"\\x92\\xa1x" + body))
    return body

def array_refs(depth):  # an array whose data reference is a tuple whose element is an array...
    body = msgpack.packb(None)
    for _ in range(depth):
        body = msgpack.packb(msgpack.ExtType(2, b"\\x94\\xa3<f4\\x90\\xc0" + body))
    return body

cases = {
    "250 nested tuples (the 1 KB segfault)": nested_ext(5, 250),
    "5000 nested tuples": nested_ext(5, 5000),
    "100k nested lists": b"\\x91" * 100_000 + b"\\xc0",
    "100k nested maps": b"\\x81\\xc0" * 100_000 + b"\\xc0",
    "array32 headers claiming the whole body, 2000 deep": (b"\\xdd" + (10_000).to_bytes(4, "big")) * 2000,
    "lists in tuples, 300 deep": alternating(300),
    "registered objects, 300 deep": objects(300),
    "arrays referring to arrays, 300 deep": array_refs(300),
}

def run():
    for name, body in cases.items():
        try:
            decode(body)
        except DecodeError as exc:
            print("refused", name, "|", str(exc)[:80])
        else:
            print("ACCEPTED", name)
    meta = b"\\x91" * 100_000 + b"\\xc0"
    head = b"MA" + bytes([1, 4]) + len(meta).to_bytes(4, "little") + meta
    try:
        frames.unpack([head], max_header_bytes=1 << 20)
    except FrameError as exc:
        print("refused deep meta |", str(exc)[:80])

run()
threading.stack_size(1 << 20)  # decoding also fits a small thread stack
worker = threading.Thread(target=run)
worker.start()
worker.join()
print("done")
"""


@pytest.mark.processes
def test_deep_nesting_is_refused_without_crashing() -> None:
    done = run_child(_DEEP)
    assert done.returncode == 0, f"the decoding process died ({done.returncode}): {done.stderr[-2000:]}"
    lines = done.stdout.splitlines()
    assert lines[-1] == "done", done.stdout + done.stderr
    assert not [line for line in lines if line.startswith("ACCEPTED")], done.stdout
    assert sum(line.startswith("refused") for line in lines) == 2 * 9, done.stdout


def _nested_lists(depth: int, filler: bytes = b"") -> bytes:
    """``depth`` lists one inside the other, the innermost holding ``filler`` (a packed value) or nil."""
    return b"\x92" + b"\x91" * (depth - 1) + b"\xc0" + packed(filler) if filler else b"\x91" * depth + b"\xc0"


@pytest.mark.parametrize("filler", [b"", b"x" * 5000], ids=["small body", "large body"])
def test_nesting_is_bounded_at_max_depth_for_small_and_large_bodies(filler: bytes) -> None:
    # A small body is bounded by counting the bytes that can open a level; a large one by walking the values.
    assert decode(_nested_lists(MAX_DEPTH, filler)) is not None
    with pytest.raises(DecodeError, match=f"nests more than {MAX_DEPTH} deep"):
        decode(_nested_lists(MAX_DEPTH + 1, filler))


def unchecked_encoding(value: Any) -> bytes:
    """``value``'s encoding made without the sender's own depth check, as a hostile peer would."""
    return codec._Encoder(OUT_OF_BAND_THRESHOLD, use_shared_memory=False).pack(value)


def test_tuples_and_registered_objects_count_as_levels() -> None:
    deep: Any = None
    for _ in range(MAX_DEPTH - 2):
        deep = [deep]
    padding = "p" * 5000  # a large body: measured by the walk
    assert decode(*encode([padding, (deep,)]))[1][0] is not None  # list, tuple, 62 lists: 64 levels
    too_deep = [padding, ([deep],)]
    with pytest.raises(UnsupportedTypeError, match="nest more than"):  # a sender of ours refuses it...
        encode(too_deep)
    with pytest.raises(DecodeError, match="nests more than"):  # ...and a receiver refuses it from anyone else
        decode(unchecked_encoding(too_deep))
    with pytest.raises(DecodeError, match="nests more than"):
        decode(*encode([padding, Point(1, [1.0], "t"), {"k": Model(name="m", weights=[1.0])}, [[Point(2, deep)]]]))
    nested: Any = 1
    for _ in range(MAX_EXT_DEPTH):
        nested = (nested,)
    assert decode(*encode(nested)) == nested
    with pytest.raises(DecodeError, match=f"nest more than {MAX_EXT_DEPTH} deep"):
        decode(*encode((nested,)))


# --- allocation from tiny input ------------------------------------------------------------------------------------


def test_a_tensor_or_array_must_bring_the_bytes_its_shape_needs() -> None:
    import torch

    for code, dtype in ((TENSOR, "float32"), (ARRAY, "<f4")):
        with pytest.raises(DecodeError, match="where the shape needs 16000000"):
            decode(packed(ext(code, [dtype, [4_000_000], None, b""])))
        with pytest.raises(DecodeError, match="where the shape needs"):
            decode(packed(ext(code, [dtype, [4], None, 0])), [b"\0" * 15])
        with pytest.raises(DecodeError, match="too large"):
            decode(packed(ext(code, [dtype, [0, 2**62, 2**62], None, b""])))
    empty = decode(packed(ext(TENSOR, ["float32", [0, 1 << 40], None, b""])))
    assert isinstance(empty, torch.Tensor) and empty.numel() == 0


@pytest.mark.parametrize(
    "dtype", ["O", "|O", "V8", "|V1000000000", "<M8[ns]", "|S5", "<U3", "(2,)<i4", "i4,i4", "<f99", "", 5, None]
)
def test_only_plain_numeric_and_bool_dtypes_decode(dtype: Any) -> None:
    with pytest.raises(DecodeError, match="dtype"):
        decode(packed(ext(ARRAY, [dtype, [1], None, b"\0" * 8])))
    with pytest.raises(DecodeError, match="dtype"):
        decode(packed(ext(TENSOR, [dtype, [1], None, b"\0" * 8])))


def test_tensor_dtype_names_are_not_arbitrary_torch_attributes() -> None:
    for name in ("Tensor", "load", "qint8", "__class__", "float"):
        with pytest.raises(DecodeError, match="dtype"):
            decode(packed(ext(TENSOR, [name, [1], None, b"\0" * 8])))


@pytest.mark.parametrize(
    ("shape", "perm"),
    [
        *[([-1], None), ([True], None), ([1.0], None), ([1] * 33, None), ("4", None), ([2, 2], [0, 0])],
        *[([2, 2], [1]), ([2, 2], [0, 2]), ([2, 2], [True, False]), ([2, 2], "10"), ([2, 2], [1.0, 0.0])],
    ],
)
def test_shapes_and_permutations_are_checked(shape: Any, perm: Any) -> None:
    with pytest.raises(DecodeError, match=r"shape|permutation"):
        decode(packed(ext(ARRAY, ["|u1", shape, perm, b"\0" * 4])))


def test_each_buffer_is_used_once_and_refs_are_typed() -> None:
    big = b"\1" * (1 << 16)
    with pytest.raises(DecodeError, match="each referenced once"):
        decode(packed([ext(BUFFER, 0), ext(BUFFER, 0)]), [big])  # two copies of one frame: twice the memory
    for ref in (-1, 1, True, 2.0, None, "0", [0], [0, 0], ["miles-1-" + "0" * 32], {"a": 0}):
        with pytest.raises(DecodeError):
            decode(packed(ext(BUFFER, ref)), [big])
    with pytest.raises(DecodeError, match="invalid shared-memory reference"):
        decode(packed(ext(BUFFER, ["../../etc/passwd", 16])))


def test_registered_object_states_are_checked_and_failures_are_decode_errors() -> None:
    assert decode(packed(ext(OBJECT, [f"{SAMPLES}:Point", {"x": 1, "y": [2.0]}]))) == Point(1, [2.0])
    for state in (
        [], ["x"], [1, {}], "name", {"a": 1}, [f"{SAMPLES}:Point", {"x": 1}, 3], ["os:system", "ls"],
        [f"{SAMPLES}:Point", {"x": 1, "y": [2.0], "bad": 1}], [f"{SAMPLES}:Point", [1, [2.0]]],
        [f"{SAMPLES}:Color", "green"], [f"{SAMPLES}:Model", {"name": 5}], [f"{SAMPLES}:Model", None],
    ):  # fmt: skip
        with pytest.raises(DecodeError):
            decode(packed(ext(OBJECT, state)))
    with pytest.raises(DecodeError, match="register_type"):
        decode(packed(ext(OBJECT, ["builtins:eval", "1"])))


def fixext1(code: int, data: bytes) -> bytes:
    """An extension of any code, negative ones too (msgpack.ExtType refuses those)."""
    return b"\xd4" + code.to_bytes(1, "big", signed=True) + data


def test_unknown_extension_codes_and_non_list_tuples_are_refused() -> None:
    for code in (-128, -2, 0, 7, 127):  # 6 is a sealed pickle (tests/security/test_pickle_auth.py)
        with pytest.raises(DecodeError, match="unknown msgpack extension"):
            decode(fixext1(code, b"\x90"))
    assert decode(b"\xd6\xff" + (5).to_bytes(4, "big")) == 5.0  # a timestamp (-1) is only a float here
    with pytest.raises(DecodeError):
        decode(fixext1(-1, b"\x90"))
    for state in (1, "abc", {"a": 1}, None, b"xy"):
        with pytest.raises(DecodeError, match="tuple"):
            decode(packed(ext(TUPLE, state)))


_NO_TORCH = """
import sys, msgpack
from transport import DecodeError, decode
assert "torch" not in sys.modules, "importing transport imported torch"
tensor = msgpack.packb(msgpack.ExtType(3, msgpack.packb(["float32", [4], None, b"\\0" * 16])))
try:
    decode(tensor)
except DecodeError as exc:
    print("refused:", exc)
print("torch imported:", "torch" in sys.modules)
array = msgpack.packb(msgpack.ExtType(2, msgpack.packb(["<f4", [4], None, b"\\0" * 16])))
print("array:", decode(array).tolist())
"""


@pytest.mark.processes
def test_a_tensor_from_the_wire_never_imports_torch() -> None:
    done = run_child(_NO_TORCH)
    assert done.returncode == 0, done.stderr
    assert "refused: this process has not imported torch" in done.stdout, done.stdout
    assert "torch imported: False" in done.stdout
    assert "array: [0.0, 0.0, 0.0, 0.0]" in done.stdout


# --- frames --------------------------------------------------------------------------------------------------------


def test_messages_with_too_many_frames_are_refused_and_never_made() -> None:
    head = wire.pack(Kind.PING, [1])[0]
    assert wire.unpack([head] + [b""] * (DEFAULT_MAX_FRAMES - 1), max_header_bytes=1 << 20).kind is Kind.PING
    with pytest.raises(FrameError, match=f"exceeds the limit of {DEFAULT_MAX_FRAMES}"):
        wire.unpack([head] + [b""] * DEFAULT_MAX_FRAMES, max_header_bytes=1 << 20)
    _, buffers = encode([b"x"] * (DEFAULT_MAX_FRAMES - 1), threshold=1)
    assert len(buffers) == DEFAULT_MAX_FRAMES - 1
    with pytest.raises(TypeError, match="at most"):  # UnsupportedTypeError: the sender hears why
        encode([b"x"] * DEFAULT_MAX_FRAMES, threshold=1)


def _head(meta: bytes, kind: int = 4) -> bytes:
    return b"MA" + bytes([1, kind]) + len(meta).to_bytes(4, "little") + meta


@pytest.mark.parametrize(
    ("meta", "reason"),
    [
        (packed(["x" * (META_MAX_BYTES + 1)]), "exceeds max_str_len"),
        (packed([b"x" * (META_MAX_BYTES + 1)]), "exceeds max_bin_len"),
        (packed([list(range(META_MAX_ITEMS + 1))]), "exceeds max_array_len"),
        (packed([msgpack.ExtType(5, b"\x90")]), "ext"),
        (packed([msgpack.ExtType(5, b"")]), "extension"),
        (packed({1: 2}), "not a list"),
        (b"\x92\xc0", "malformed meta"),
        (b"\x91" * 100_000 + b"\xc0", "nests too deep"),  # deep but small ones: transport.header_checks
        (b"\x91\x81\x91\xc0\xc0", "malformed meta"),  # a list as a map key
    ],
)
def test_meta_is_small_and_flat(meta: bytes, reason: str) -> None:
    with pytest.raises(FrameError, match=reason):
        wire.unpack([_head(meta)], max_header_bytes=1 << 20)


def test_valid_meta_still_parses() -> None:
    meta = [b"\1" * 16, "method", 12.5, "boot", None, [b"\2" * 16] * META_MAX_ITEMS, True]
    assert wire.unpack(wire.pack(Kind.SUBMIT, meta), max_header_bytes=1 << 20).meta == meta
    pong = [7, "boot", {"constructed": True, "calls": 3}]
    assert wire.unpack(wire.pack(Kind.PONG, pong), max_header_bytes=1 << 20).meta == pong
