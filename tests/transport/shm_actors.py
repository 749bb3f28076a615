"""An actor that receives large buffers through shared memory and keeps views of them (tests/transport)."""

from __future__ import annotations

import gc
import importlib
from typing import Any

import numpy as np


class Holder:
    """Checks what it receives, and keeps slices of it alive on request."""

    def __init__(self, *, with_torch: bool = False) -> None:
        if with_torch:
            importlib.import_module("torch")  # a process decodes tensors only once it has imported torch
        self.kept: Any = None

    def checksum(self, data: Any) -> int:
        return int(np.asarray(data).sum(dtype=np.uint64))

    def writable(self, data: np.ndarray) -> bool:
        return bool(data.flags.writeable)

    def keep_slice(self, data: Any, nbytes: int) -> int:
        """Keep a slice of ``data`` (numpy array or tensor) and drop the rest; returns the slice's checksum."""
        self.kept = data[:nbytes]
        del data
        gc.collect()
        return self.kept_checksum()

    def kept_checksum(self) -> int:
        return int(np.asarray(self.kept).sum(dtype=np.uint64))

    def drop(self) -> None:
        self.kept = None
        gc.collect()

    def make(self, size: int, value: int) -> np.ndarray:
        return np.full(size, value, dtype=np.uint8)
