"""Lazy reading of a Hugging Face checkpoint's safetensors: one file or shards with ``model.safetensors.index.json``.

Nothing is read until asked for, and then only the rows or columns asked for (safetensors ``get_slice``), so
each tensor-parallel rank reads its own slices and never a whole file.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
from safetensors import safe_open

from actors.hf.config import UnsupportedConfig, read_json

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


class CheckpointError(ValueError):
    """A missing, misshapen or unreadable tensor; the message names the tensor and the file."""


def part_bounds(size: int, part: int, parts: int, *, what: str) -> tuple[int, int]:
    """``[start, stop)`` of slice ``part`` of ``parts`` equal slices of ``size``."""
    if size % parts:
        raise CheckpointError(f"{what}: size {size} does not split into {parts} equal tensor-parallel slices")
    step = size // parts
    return part * step, (part + 1) * step


class CheckpointReader:
    """The tensors of one HF directory, by name; use as a context manager (it keeps files open)."""

    def __init__(self, model_path: str | Path) -> None:
        self.directory = Path(model_path)
        self._files = _weight_map(self.directory)
        self._stack = ExitStack()
        self._open: dict[str, Any] = {}

    def __enter__(self) -> CheckpointReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._open.clear()
        self._stack.close()

    def names(self) -> list[str]:
        """Every tensor name in the checkpoint."""
        return list(self._files)

    def _handle(self, name: str) -> Any:
        if name not in self._files:
            raise CheckpointError(f"tensor {name} is not in the checkpoint at {self.directory}")
        file = self._files[name]
        if file not in self._open:
            path = self.directory / file
            try:
                self._open[file] = self._stack.enter_context(safe_open(str(path), framework="pt"))
            except (OSError, RuntimeError, ValueError) as exc:
                raise CheckpointError(f"cannot open {path} (holds {name}): {exc}") from exc
        return self._open[file]

    def shape(self, name: str) -> tuple[int, ...]:
        """The full shape of tensor ``name`` (reads only the header)."""
        return tuple(self._handle(name).get_slice(name).get_shape())

    def dtype(self, name: str) -> torch.dtype:
        """The stored dtype of tensor ``name`` (reads only the header)."""
        return _DTYPES[self._handle(name).get_slice(name).get_dtype()]

    def read(self, name: str, *, dim: int | None = None, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """Tensor ``name``, or only ``[start, stop)`` along ``dim`` (read from disk without the rest)."""
        view = self._handle(name).get_slice(name)
        if dim is None:
            return view[:]
        shape = view.get_shape()
        stop = shape[dim] if stop is None else stop
        if not 0 <= start <= stop <= shape[dim]:
            raise CheckpointError(f"{name}: slice [{start}, {stop}) outside dim {dim} of shape {shape}")
        index = [slice(None)] * len(shape)
        index[dim] = slice(start, stop)
        return view[tuple(index)]

    def read_part(self, name: str, *, dim: int, part: int, parts: int) -> torch.Tensor:
        """Slice ``part`` of ``parts`` equal slices of tensor ``name`` along ``dim``."""
        start, stop = part_bounds(self.shape(name)[dim], part, parts, what=name)
        return self.read(name, dim=dim, start=start, stop=stop)


_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


def _weight_map(directory: Path) -> dict[str, str]:
    """tensor name -> file name, from the shard index, or from the single ``model.safetensors``."""
    index = directory / INDEX_FILE
    if index.is_file():
        try:
            weight_map = read_json(index)["weight_map"]
        except (KeyError, UnsupportedConfig, ValueError) as exc:
            raise CheckpointError(f"{index}: not a safetensors index ({exc})") from exc
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CheckpointError(f"{index}: weight_map must map tensor names to file names")
        for file in set(weight_map.values()):
            if Path(file).name != file or not (directory / file).is_file():
                raise CheckpointError(f"{index} names shard {file!r}, which is not a file in {directory}")
        return dict(weight_map)
    single = directory / SINGLE_FILE
    if not single.is_file():
        raise CheckpointError(f"{directory} has neither {INDEX_FILE} nor {SINGLE_FILE} (only safetensors are read)")
    with safe_open(str(single), framework="pt") as handle:
        return dict.fromkeys(handle.keys(), SINGLE_FILE)
