"""What a sealed pickle costs: a 64 MiB DataProto-like batch pickled vs the same tensors as wire types, same host.

verl hands its workers a ``DataProto``: a ``TensorDict`` of tensors (``batch``), numpy object arrays
(``non_tensor_batch``) and a dict (``meta_info``). Here one of 64 MiB (int64 token ids and masks, float32
rewards) goes to an actor as an argument and comes back as a result, three ways:

- ``wire``: the same tensors and arrays in a plain dict (the codec's own types, no pickle);
- ``registered``: the same in a registered dataclass (``transport.register_type``);
- ``pickled``: a DataProto-like object holding a real ``tensordict.TensorDict`` (or, without tensordict, a plain
  class holding the dict), which has no wire type: cloudpickled and sealed with the session secret
  (``transport.sealed_pickle``), its tensors out of band (pickle protocol 5), MAC'd at both ends.

Each through shared memory (same host: the MAC binds a segment by name, see ``sealed_pickle.mac``) and as
frames (``MILES_SHM=0``: how a batch crosses hosts, where the MAC covers every byte). Prints GB/s (64 MiB /
median seconds per call) for each, and the MAC's own rate on this machine. ``--json`` prints one JSON object
as the last line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from shm_bench import median_gbps

MIB = 1 << 20
SIZE = 64 * MIB
REPEATS = 10
ROWS = 1024
KINDS = ("wire", "registered", "pickled")
LABELS = ("wire types (dict of tensors)", "registered dataclass", "sealed pickle (TensorDict inside)")


@dataclasses.dataclass
class Batch:
    """The registered-type twin of the pickled payload (registered in both processes at import)."""

    tensors: dict[str, Any]
    non_tensor: dict[str, Any]
    meta_info: dict[str, Any]


class DataProtoLike:
    """Shaped like verl's DataProto: no wire type of its own, so it travels pickled."""

    def __init__(self, batch: Any, non_tensor_batch: dict[str, np.ndarray], meta_info: dict[str, Any]) -> None:
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, meta_info

    def nbytes(self) -> int:
        tensors = self.batch.values() if not hasattr(self.batch, "items") else [v for _, v in self.batch.items()]
        return sum(t.numel() * t.element_size() for t in tensors)


class Sink:
    """Receives a payload and answers its tensor bytes; returns a cached one of each kind."""

    def __init__(self) -> None:
        self.cache: dict[str, Any] = {}

    def nbytes(self, payload: Any) -> int:
        return _nbytes(payload)

    def make(self, kind: str) -> Any:
        if kind not in self.cache:
            self.cache[kind] = payload(kind)
        return self.cache[kind]


def _tensors() -> dict[str, torch.Tensor]:
    """64 MiB: token ids and masks (int64) and rewards (float32), ROWS rows."""
    reward_bytes = ROWS * 4
    width = (SIZE - reward_bytes) // (2 * 8 * ROWS)
    tensors = {
        "input_ids": torch.randint(0, 32_000, (ROWS, width)),
        "attention_mask": torch.ones(ROWS, width, dtype=torch.int64),
        "rewards": torch.rand(ROWS),
    }
    return tensors


def payload(kind: str) -> Any:
    tensors = _tensors()
    non_tensor = {"uid": np.array([f"prompt-{i}" for i in range(ROWS)], dtype=object)}
    meta = {"global_step": 3, "temperature": 1.0}
    if kind == "wire":
        return {"batch": tensors, "non_tensor_batch": {"uid": [str(u) for u in non_tensor["uid"]]}, "meta": meta}
    if kind == "registered":
        return Batch(tensors, {"uid": [str(u) for u in non_tensor["uid"]]}, meta)
    try:
        import tensordict

        batch: Any = tensordict.TensorDict(tensors, batch_size=[ROWS])
    except ImportError:
        batch = tensors
    return DataProtoLike(batch, non_tensor, meta)


def _nbytes(value: Any) -> int:
    if isinstance(value, DataProtoLike):
        return value.nbytes()
    tensors = value.tensors if isinstance(value, Batch) else value["batch"]
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _register() -> None:
    from transport import register_type

    register_type(Batch)


_register()


def mac_gbps() -> float:
    from transport import sealed_pickle

    data = np.full(SIZE, 3, np.uint8)
    key = os.urandom(32)
    return median_gbps(SIZE, REPEATS, lambda: sealed_pickle.mac(key, [b"", data], [None, None]))


def _measure(results: dict[str, float], path: str) -> None:
    from runtime import spawn

    actor = spawn("pickle_payload_bench:Sink")
    try:
        for kind in KINDS:
            value = payload(kind)
            assert actor.nbytes(value).result(timeout=60) == _nbytes(value) >= SIZE - MIB
            send, fetch = (lambda v=value: actor.nbytes(v).result(60)), (lambda k=kind: actor.make(k).result(60))
            results[f"{path}_{kind}_arg_gbps"] = median_gbps(SIZE, REPEATS, send)
            results[f"{path}_{kind}_ret_gbps"] = median_gbps(SIZE, REPEATS, fetch)
    finally:
        actor.kill()


def run() -> dict[str, float]:
    from transport.shared_memory import SHM_ENV

    results = {"mac_gbps": mac_gbps()}
    _measure(results, "shm")
    os.environ[SHM_ENV] = "0"  # read as a connection opens, and inherited by the actor: frames, as between hosts
    try:
        _measure(results, "frames")
    finally:
        del os.environ[SHM_ENV]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from pickle_payload_bench import run as run_by_name  # its classes by module name, importable in the actor

    results = run_by_name()
    print(f"64 MiB DataProto-like batch, same host, {REPEATS} calls each (GB/s = 64 MiB / median s per call)")
    print(f"  MAC (HMAC-SHA256 over 4 MiB pieces, {os.cpu_count()} CPUs): {results['mac_gbps']:.2f} GB/s")
    paths = (("shm", "through shared memory"), ("frames", "as frames (MILES_SHM=0: the path between hosts)"))
    for path, title in paths:
        print(f"  {title}")
        print(f"    {'payload':<34} {'argument':>9} {'result':>9}")
        for kind, label in zip(KINDS, LABELS, strict=True):
            arg, ret = results[f"{path}_{kind}_arg_gbps"], results[f"{path}_{kind}_ret_gbps"]
            print(f"    {label:<34} {arg:>9.2f} {ret:>9.2f}")
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
