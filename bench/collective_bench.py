"""State-dict transfer between two actors, three ways, in one run: collective refs, the actor transport, and
torch.distributed send/recv directly (the ceiling).

A float32 state dict of 16 MiB tensors (256 MiB: 16, 1 GiB: 64) moves from a sender actor into buffers the
receiver allocated once (its "live weights"), timed in the receiver:

- ``refs``: ``ref.get(into=buffers)`` of ``runtime.put(state, transport="collective")`` plus ``ref.free()``
  (one control call to the owner, then one send/recv per tensor over the group);
- ``actor``: ``ref.get()`` of a plain ``runtime.put(state)`` (the actor transport: shared memory on one host), then
  ``copy_`` into the buffers;
- ``direct``: after a barrier, one ``send``/``recv`` per tensor on the same gloo group, no runtime involved.

GB/s = bytes / median seconds; ``refs_over_direct`` is the refs' time over the direct time (target <= 1.2).
``--backend nccl`` runs the same on two GPUs (CUDA tensors; the actor transport carries no CUDA tensors, so that
row's sender copies to the host before the clock starts and the receiver copies back to its GPU). ``--json``
prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

MIB = 1 << 20
TENSOR_BYTES = 16 * MIB
SIZES = {"256mib": (256 * MIB, 5), "1gib": (1024 * MIB, 3)}  # label: (bytes, timed repeats)
TAG = 77


class Peer:
    """Sender or receiver of the benchmark's state dicts."""

    def __init__(self, *, device: str = "cpu") -> None:
        import torch

        if device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("--backend nccl needs a GPU per peer (CUDA_VISIBLE_DEVICES is set per peer)")
        self.device = device  # with nccl each peer sees one GPU, cuda:0 (CUDA_VISIBLE_DEVICES)
        self.state: dict[str, Any] = {}
        self.buffers: dict[str, Any] = {}

    def _state_dict(self, size: int, fill: float) -> dict[str, Any]:
        import torch

        numel, count = TENSOR_BYTES // 4, size // TENSOR_BYTES
        return {f"layer{i}.weight": torch.full((numel,), fill + i, device=self.device) for i in range(count)}

    def make(self, size: int) -> int:
        self.state = self._state_dict(size, 1.0)
        return len(self.state)

    def allocate(self, size: int) -> int:
        self.buffers = self._state_dict(size, 0.0)
        return len(self.buffers)

    def put_ref(self, collective: bool) -> Any:
        import runtime

        if collective:
            return runtime.put(self.state, transport="collective")
        return runtime.put({name: tensor.cpu() for name, tensor in self.state.items()})  # no CUDA on the transport

    def pull_ref(self, ref: Any) -> float:
        started = time.perf_counter()
        ref.get(into=self.buffers, timeout=600)
        ref.free()
        self._sync()
        return time.perf_counter() - started

    def pull_actor(self, ref: Any) -> float:
        started = time.perf_counter()
        for name, tensor in ref.get(timeout=600).items():
            self.buffers[name].copy_(tensor)
        ref.free()
        self._sync()
        return time.perf_counter() - started

    def direct(self, group: str, peer: int, send: bool) -> float:
        import torch.distributed as dist

        from runtime import collective

        pg = collective.get_group(group)
        dist.barrier(group=pg)
        started = time.perf_counter()
        tensors = self.state if send else self.buffers
        works = [(pg.send if send else pg.recv)([t], peer, TAG) for t in tensors.values()]
        for work in works:
            work.wait()
        self._sync()
        return time.perf_counter() - started

    def check(self, size: int) -> bool:
        expected = self._state_dict(size, 1.0)
        return all(bool((self.buffers[n] == t).all()) for n, t in expected.items())

    def _sync(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()


def run(backend: str) -> dict[str, float]:
    from runtime.collective import create_group, destroy_group

    device = "cuda" if backend == "nccl" else "cpu"
    sender, receiver = _spawn(device)
    results: dict[str, float] = {}
    try:
        group = create_group([sender, receiver], backend=backend, name="bench", timeout_s=120)
        for label, (size, repeats) in SIZES.items():
            sender.make(size).result(600)
            receiver.allocate(size).result(600)
            times: dict[str, list[float]] = {"refs": [], "actor": [], "direct": []}
            for index in range(repeats + 1):  # the first round warms up, untimed
                ref = sender.put_ref(True).result(60)
                took = {"refs": receiver.pull_ref(ref).result(600)}
                assert receiver.check(size).result(600), "refs delivered wrong bytes"
                plain = sender.put_ref(False).result(60)
                took["actor"] = receiver.pull_actor(plain).result(600)
                sending = sender.direct("bench", 1, True)
                took["direct"] = receiver.direct("bench", 0, False).result(600)
                sending.result(600)
                if index:
                    for key, value in took.items():
                        times[key].append(value)
            for key, values in times.items():
                results[f"{key}_gbps_{label}"] = size / statistics.median(values) / 1e9
            results[f"refs_over_direct_{label}"] = statistics.median(times["refs"]) / statistics.median(times["direct"])
            sender.make(TENSOR_BYTES).result(60)  # drop the big dicts before the next size
            receiver.allocate(TENSOR_BYTES).result(60)
        destroy_group(group)
    finally:
        sender.kill()
        receiver.kill()
    return results


def _spawn(device: str) -> list[Any]:
    from runtime import spawn

    env = [{"CUDA_VISIBLE_DEVICES": str(i)} if device == "cuda" else None for i in range(2)]
    return [spawn(Peer, kwargs={"device": device}, name=f"bench-peer-{i}", env=env[i]) for i in range(2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    repo = Path(__file__).resolve().parent.parent
    os.chdir(repo)
    sys.path[:0] = [str(repo), str(Path(__file__).resolve().parent)]
    results = run(args.backend)
    for key, value in results.items():
        print(f"{key}: {value:.2f}", flush=True)
    if args.json:
        print(json.dumps({"backend": args.backend, **{key: round(value, 3) for key, value in results.items()}}))


if __name__ == "__main__":
    main()
