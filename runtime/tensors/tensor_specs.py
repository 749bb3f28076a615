"""What a device-resident ref says of its tensors (name, shape, dtype), and the checks on both ends: a ref may come
from a peer, so nothing is allocated before its specs are checked. torch is imported only inside the functions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from transport.type_registry import register_type

MAX_TENSORS = 100_000
MAX_DIMS = 32
MAX_NAME = 1024
MAX_ALLOCATE_BYTES = 16 << 30  # what get() without ``into`` allocates at most, unless told (``max_bytes``)
DTYPES = (
    "float32", "float16", "bfloat16", "float64", "float8_e4m3fn", "float8_e5m2",
    "int8", "uint8", "int16", "int32", "int64", "bool", "complex64",
)  # fmt: skip


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # one of DTYPES

    def describe(self) -> str:
        return f"{list(self.shape)} {self.dtype}"


register_type(TensorSpec)


def spec_of(name: str, tensor: Any) -> TensorSpec:
    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in DTYPES:
        raise TypeError(f"tensor {name!r}: dtype {dtype} cannot ride a collective ref (one of {list(DTYPES)})")
    return TensorSpec(name, tuple(int(n) for n in tensor.shape), dtype)


def checked_specs(specs: Any) -> list[TensorSpec]:
    """``specs`` as received, refused with ValueError unless well formed and bounded (counts, dims and names; dtypes
    from a fixed list, never ``getattr`` on a peer's word)."""
    if not isinstance(specs, (list, tuple)) or not 1 <= len(specs) <= MAX_TENSORS:
        raise ValueError(f"a tensor ref must list 1..{MAX_TENSORS} tensor specs")
    seen: set[str] = set()
    for spec in specs:
        if not isinstance(spec, TensorSpec) or not isinstance(spec.name, str) or len(spec.name) > MAX_NAME:
            raise ValueError(f"malformed tensor spec in a tensor ref: {str(spec)[:200]}")
        if spec.name in seen:
            raise ValueError(f"tensor ref names {spec.name!r} twice")
        seen.add(spec.name)
        shape = spec.shape
        if not isinstance(shape, (list, tuple)) or len(shape) > MAX_DIMS:
            raise ValueError(f"tensor {spec.name!r}: shape {str(shape)[:100]} is not a list of at most {MAX_DIMS} dims")
        if not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**48 for n in shape):
            raise ValueError(f"tensor {spec.name!r}: shape {list(shape)} has a dimension that is not a size")
        if spec.dtype not in DTYPES:
            raise ValueError(f"tensor {spec.name!r}: dtype {str(spec.dtype)[:40]!r} is not one of {list(DTYPES)}")
    return list(specs)


def torch_dtype(name: str) -> Any:
    import torch

    if name not in DTYPES:
        raise ValueError(f"dtype {name!r} is not one of {list(DTYPES)}")
    return getattr(torch, name)


def allocate(specs: list[TensorSpec], device: Any, max_bytes: int, what: str) -> dict[str, Any]:
    """Fresh buffers for ``specs``; refused above ``max_bytes`` in all (a ref may come from a peer)."""
    import torch

    if (size := total_bytes(specs)) > max_bytes:
        raise ValueError(f"{what}: {size} bytes in {len(specs)} tensor(s) is more than max_bytes={max_bytes}; "
                         "pass into= buffers of your own, or a larger max_bytes to get()")  # fmt: skip

    return {spec.name: torch.empty(spec.shape, dtype=torch_dtype(spec.dtype), device=device) for spec in specs}


def match_into(specs: list[TensorSpec], into: Any, device: Any, what: str) -> dict[str, Any]:
    """The receiver's buffers, in the ref's order, once each matches its spec (name, shape, dtype, device,
    contiguous); otherwise ValueError naming the tensor and what differs. Nothing has moved yet."""
    import torch

    if not isinstance(into, dict):
        raise TypeError(f"{what}: into= must be a dict of name -> tensor, not {type(into).__name__}")
    names = [spec.name for spec in specs]
    missing = [name for name in names if name not in into]
    extra = [name for name in into if name not in set(names)]
    if missing or extra:
        raise ValueError(
            f"{what}: into= buffers do not match the ref's tensors: missing {missing[:8]}, not in the ref {extra[:8]}"
        )
    buffers = {}
    for spec in specs:
        buffer = into[spec.name]
        if not isinstance(buffer, torch.Tensor):
            raise TypeError(f"{what}: into[{spec.name!r}] is a {type(buffer).__name__}, not a tensor")
        got = TensorSpec(spec.name, tuple(buffer.shape), str(buffer.dtype).removeprefix("torch."))
        if got != spec:
            raise ValueError(f"{what}: into[{spec.name!r}] is {got.describe()} but the ref holds {spec.describe()}")
        if buffer.device.type != device.type:
            raise ValueError(f"{what}: into[{spec.name!r}] is on {buffer.device}; this group's backend needs {device}")
        if not buffer.is_contiguous():
            raise ValueError(f"{what}: into[{spec.name!r}] is not contiguous (received bytes land in place)")
        buffers[spec.name] = buffer
    return buffers


def total_bytes(specs: list[TensorSpec]) -> int:

    return sum(math.prod(spec.shape) * torch_dtype(spec.dtype).itemsize for spec in specs)
