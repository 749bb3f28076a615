"""Thousands of almost-valid bodies: each decodes to a value no larger than its input or raises DecodeError.

Valid encodings of varied objects, mutated byte by byte, and states of every extension kind with one hostile field
or more. The decoding runs in a child process, so that a crash fails the test instead of ending the run.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from codec_samples import ARRAY, BUFFER, OBJECT, SAMPLES, TENSOR, TUPLE, Color, Model, Point, ext, packed, run_child

from transport import DecodeError, decode, encode

pytestmark = pytest.mark.processes

# --- thousands of almost-valid bodies ------------------------------------------------------------------------------


def corpus() -> list[tuple[bytes, list[Any]]]:
    """Valid encodings of varied objects: every extension kind, inline and out of band."""
    import torch

    objects: list[Any] = [
        (1, (2, "x"), ()),
        {"a": [1, 2.5, None, True], "b": b"raw", 3: (4, 5), "s": "ü"},
        [[1, "a"], {"k": 2.0}],
        np.arange(24.0).reshape(2, 3, 4).transpose(2, 0, 1),
        np.zeros((0, 3)),
        np.array(3.5, dtype=np.float32),
        np.arange(20_000, dtype=np.float32),  # out of band
        {"blob": bytes(range(256)) * 300, "small": b"x"},  # out of band
        torch.arange(12, dtype=torch.float32).reshape(3, 4).t(),
        torch.ones(2, 3, dtype=torch.bfloat16),
        torch.tensor([True, False]),
        torch.empty(0, 2),
        torch.tensor(7, dtype=torch.int64),
        torch.arange(20_000, dtype=torch.int32),  # out of band
        Point(1, [2.0, 3.0], "t"),
        Color.BLUE,
        Model(name="m", values=(1, 2), weights=[0.5]),
        [Point(2, []), Color.RED, (np.arange(3, dtype=np.int16), torch.zeros(2))],
        {"args": [1, (2, [3, (4,)])], "kwargs": {"a": np.arange(6, dtype=np.uint8).reshape(2, 3)}},
    ]
    objects += [np.arange(12).astype(dtype).reshape(3, 4) for dtype in ("u1", "i2", "i8", "f2", "f8", "c8", "?")]
    return [(body, list(buffers)) for body, buffers in map(encode, objects)]


_INTERESTING = bytes([0x00, 0x01, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xC0, 0xC1, 0xC4, 0xC5, 0xC6, 0xC7, 0xC9])
_INTERESTING += bytes([0xCC, 0xCE, 0xCF, 0xD3, 0xD4, 0xD8, 0xDC, 0xDD, 0xDE, 0xDF, 0xE0, 0xFF])


def mutate(body: bytes, rng: random.Random) -> bytes:
    """``body`` with one to three random edits: bytes replaced, flipped, inserted, deleted, duplicated."""
    data = bytearray(body)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(data) + 1)
        edit = rng.randrange(7)
        if edit == 0 and at < len(data):
            data[at] = rng.randrange(256)
        elif edit == 1 and at < len(data):
            data[at] = rng.choice(_INTERESTING)
        elif edit == 2 and at < len(data):
            data[at] ^= 1 << rng.randrange(8)
        elif edit == 3:
            del data[at:]
        elif edit == 4:
            data[at:at] = rng.randbytes(rng.randint(1, 8)) if rng.random() < 0.5 else bytes([rng.choice(_INTERESTING)])
        elif edit == 5:
            del data[at : at + rng.randint(1, 8)]
        else:
            data[at:at] = data[at : at + rng.randint(1, 16)]
    return bytes(data)


def mutate_buffers(buffers: list[Any], rng: random.Random) -> list[Any]:
    if not buffers or rng.random() < 0.7:
        return buffers
    choice = rng.randrange(3)
    if choice == 0:
        return buffers[:-1]
    if choice == 1:
        return [memoryview(bytes(buffers[0]))[: rng.randrange(len(memoryview(buffers[0]).cast("B")) + 1)]]
    return [*buffers, b"\0" * 64]


_DTYPES = ["<f4", "|u1", "|b1", "<c8", "float32", "bfloat16", "bool", "int64", "O", "V8", "<M8[ns]", "|S5"]
_DTYPES += ["(2,)<i4", "i4,i4", "", 5, None, [1], b"<f4", "Tensor", "qint8"]
_SHAPES: list[Any] = [[4], [2, 2], [], [0], [16], [0, 2**62], [4_000_000], [-1], [2**64 - 1], [1.5], [True]]
_SHAPES += [[1] * 33, [1] * 32, "4", None, {"a": 1}, [[2]], [2**31, 2**31], [2, 2, 2, 2]]
_PERMS: list[Any] = [None, [0], [1, 0], [0, 0], [2], [-1], [True, False], "01", [0, 1, 2], [1.0, 0.0], [3, 2, 1, 0]]
_REFS: list[Any] = [b"", b"\0" * 4, b"\1" * 16, b"\0" * 32, 0, 1, 2, -1, 2**63, True, 3.5, None, "x", []]
_REFS += [["miles-1-" + "0" * 32, 16], ["miles-1-" + "0" * 16, 16], ["../../etc/passwd", 16], ["a", "b"], [1, 2]]
_REFS += [[b"n", 16], {"a": 1}, ["miles-1-" + "0" * 32, -1]]
_NAMES: list[Any] = [f"{SAMPLES}:{cls}" for cls in ("Point", "Color", "Model")] + ["os:system", "builtins:eval", "", 1]
_FIELDS: list[Any] = [{"x": 1, "y": [2.0], "tag": "t"}, {"x": "no"}, {}, [], "RED", 1, "b", None, {1: 2}]
_FIELDS += [{"x": 1, "y": [2.0], "extra": 1}, {"name": "m", "values": [1, "a"]}, {"name": "m", "weights": {}}]
_FIELDS += [{"__class__": 1}, {"name": "m" * 10_000}]


def structured_cases(rng: random.Random) -> Iterator[tuple[bytes, list[Any]]]:
    """Bodies built from extension states with hostile fields, alone and inside containers."""
    buffers = [b"\0" * 16, memoryview(b"\1" * 4), b"\2" * 32]
    states: list[tuple[int, Any]] = []
    for code in (ARRAY, TENSOR):
        fields = list(itertools.product(_DTYPES, _SHAPES, _PERMS, _REFS))
        states += [(code, list(state)) for state in rng.sample(fields, 2500)]
        for base in (["<f4", [2, 2], [1, 0], b"\0" * 16], ["float32", [4], None, 0]):
            for position, values in enumerate((_DTYPES, _SHAPES, _PERMS, _REFS)):
                states += [(code, [*base[:position], value, *base[position + 1 :]]) for value in values]
        states += [(code, state) for state in ([], [1], "x", {"a": 1}, ["<f4", [4], None, b"\0" * 16, 1])]
    states += [(OBJECT, [name, fields]) for name in _NAMES for fields in _FIELDS]
    states += [(OBJECT, state) for state in ([], ["x"], [1, {}], "name", {"a": 1}, [_NAMES[0], {}, 3])]
    states += [(BUFFER, ref) for ref in _REFS]
    states += [(TUPLE, state) for state in (1, "abc", {"a": 1}, None, b"xy", [1, 2], [], [[]])]
    for code, state in states:
        hostile = ext(code, state)
        for wrap in (lambda x: x, lambda x: [1, x], lambda x: ext(TUPLE, [x]), lambda x: {"k": [x]}):
            yield packed(wrap(hostile)), buffers
        yield packed({ext(TUPLE, [1]): hostile}), buffers[:1]
    fixext = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
    for code in (-128, -2, -1, 0, 6, 42, 127):
        for size in fixext:  # -1 with 4 or 8 bytes is a timestamp
            yield bytes([fixext[size]]) + code.to_bytes(1, "big", signed=True) + rng.randbytes(size), []


def _payload_bound(value: Any, limit: int) -> str:
    """A description of any array, tensor or bytes in ``value`` larger than ``limit`` bytes (else '')."""
    stack, seen = [value], 0
    while stack and seen < 100_000:
        item, seen = stack.pop(), seen + 1
        nbytes = getattr(item, "nbytes", None)
        if type(item).__name__ == "Tensor":
            nbytes = item.numel() * item.element_size()
        elif isinstance(item, bytes):
            nbytes = len(item)
        if isinstance(nbytes, int) and nbytes > limit:
            return f"{type(item).__name__} of {nbytes} bytes from {limit} bytes of input"
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
    return ""


def fuzz(seed: int = 1234) -> dict[str, Any]:
    """Decode every case; report how many, and every outcome other than a bounded value or DecodeError."""
    import torch  # noqa: F401  (tensors decode only where torch is imported)

    rng = random.Random(seed)
    valid = corpus()
    cases: list[tuple[bytes, list[Any]]] = list(valid)
    for body, buffers in valid:
        cases += [(mutate(body, rng), mutate_buffers(buffers, rng)) for _ in range(1500)]
    cases += list(structured_cases(rng))
    failures, accepted, slowest, started = [], 0, 0.0, time.monotonic()
    for body, buffers in cases:
        limit = len(body) + sum(memoryview(buffer).nbytes for buffer in buffers)
        began = time.perf_counter()
        try:
            value = decode(body, buffers)
        except DecodeError:
            continue
        except BaseException as exc:  # the point of the test: nothing but DecodeError
            failures.append(f"{type(exc).__name__}: {str(exc)[:200]} from body {body[:200].hex()}")
            continue
        finally:
            slowest = max(slowest, time.perf_counter() - began)
        accepted += 1
        problem = _payload_bound(value, limit)
        if problem:
            failures.append(f"{problem}: body {body[:200].hex()}")
    seconds = time.monotonic() - started
    return {"cases": len(cases), "accepted": accepted, "failures": failures, "seconds": seconds, "slowest": slowest}


def test_thousands_of_almost_valid_bodies_decode_or_raise_decode_error() -> None:
    code = f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_codec_fuzz as t; "
    code += "print(json.dumps(t.fuzz()))"
    done = run_child(code, timeout=240)
    assert done.returncode == 0, f"the decoding process died ({done.returncode}): {done.stderr[-3000:]}"
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["cases"] >= 10_000
    assert 0 < report["accepted"] < report["cases"]  # both outcomes happen: the cases are near the valid ones
    assert report["slowest"] < 0.5, f"one case took {report['slowest']:.2f}s to decode"
    assert not report["failures"], "\n".join(report["failures"][:20])
