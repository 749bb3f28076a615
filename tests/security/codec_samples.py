"""Registered sample types and msgpack helpers shared by the codec attack tests (attacks and fuzz)."""

from __future__ import annotations

import dataclasses
import enum
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import pydantic

from transport import register_type

ROOT = Path(__file__).resolve().parents[2]
TUPLE, BUFFER, ARRAY, TENSOR, OBJECT = 5, 1, 2, 3, 4
#: The module the sample types are registered from: their wire names are ``f"{SAMPLES}:Point"`` and so on.
SAMPLES = __name__


@register_type
@dataclasses.dataclass
class Point:
    x: int
    y: list[float]
    tag: str = ""


@register_type
class Color(enum.Enum):
    RED = 1
    BLUE = "b"


@register_type
class Model(pydantic.BaseModel):
    name: str
    values: tuple[int, ...] = ()
    weights: list[float] = []


def ext(code: int, state: Any) -> msgpack.ExtType:
    return msgpack.ExtType(code, msgpack.packb(state, use_bin_type=True))


def packed(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def run_child(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
