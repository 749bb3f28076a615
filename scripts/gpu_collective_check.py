"""GPU check (not part of CI): collective groups and device-resident refs over NCCL, GPU to GPU.

Run on a host with 2+ CUDA GPUs (NCCL refuses two ranks on one GPU)::

    python scripts/gpu_collective_check.py [--mib 256] [--bench]

Two actors, one GPU each (``CUDA_VISIBLE_DEVICES``, as the launcher places GPU workers), in an ``nccl`` group
(``runtime.collective.create_group``). It checks, in order: an all_reduce on the group; the weight sync of
``actors.trainer.weights_collective``'s shape on CUDA: the sender buckets a CUDA state dict into collective refs,
the receiver pulls each bucket into its own live CUDA parameters (their storage stays put), frees it, the
sender's ``wait_freed`` returns, the version is set explicitly, and the receiver's weights equal a
``torch.save``/``torch.load`` round trip of the sender's; ``into`` buffers of a wrong shape are refused before any
byte moves; the owner's death during a transfer fails the receiver with ActorDied within 30 s. With ``--bench``
it then runs ``bench/collective_bench.py --backend nccl``. NIXL: this build has no NIXL transport; the check
says so and does not count it. It prints one line per check and PASS, or FAIL and the first failure (exit 1);
without 2 GPUs it exits 2. Every wait has a deadline; the actors are killed at the end.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BUCKET_BYTES = 64 << 20
TIMEOUT_S = 120


class GpuPeer:
    """One GPU (cuda:0 of its CUDA_VISIBLE_DEVICES) holding a state dict of ``mib`` MiB."""

    def __init__(self, *, mib: int, seed: int) -> None:
        import torch

        generator = torch.Generator(device="cuda").manual_seed(seed)
        count = max(1, mib // 16)
        self.params = {
            f"layers.{i}.weight": torch.randn(2048, 2048, device="cuda", generator=generator) for i in range(count)
        }
        self.version = "initial"
        self.refs: list[Any] = []

    def all_reduce(self, group: str, value: float) -> float:
        import torch
        import torch.distributed as dist

        from runtime import collective

        tensor = torch.tensor([value], device="cuda")
        dist.all_reduce(tensor, group=collective.get_group(group))
        return float(tensor.item())

    def save(self, path: str) -> None:
        import torch

        torch.save({name: tensor.cpu() for name, tensor in self.params.items()}, path)

    def put_buckets(self) -> list[Any]:
        """The trainer's side: buckets of at most BUCKET_BYTES as collective refs (one reader each)."""
        import runtime

        buckets: list[dict[str, Any]] = [{}]
        size = 0
        for name, tensor in self.params.items():
            if buckets[-1] and size + tensor.nbytes > BUCKET_BYTES:
                buckets.append({})
                size = 0
            buckets[-1][name] = tensor
            size += tensor.nbytes
        self.refs = [runtime.put(bucket, transport="collective") for bucket in buckets]
        return self.refs

    def wait_freed(self) -> str:
        from runtime import collective

        collective.wait_freed(self.refs, timeout=TIMEOUT_S)
        return "freed"

    def pull(self, refs: list[Any], version: str) -> dict[str, int]:
        """The engine's side: each bucket straight into the live parameters, then the version, set explicitly."""
        addresses = {name: tensor.data_ptr() for name, tensor in self.params.items()}
        for ref in refs:
            ref.get(into={name: self.params[name] for name in ref.names}, timeout=TIMEOUT_S)
            ref.free()
        self.version = version
        moved = sum(self.params[name].data_ptr() != address for name, address in addresses.items())
        return {"tensors": len(addresses), "moved_storage": moved}

    def equals_file(self, path: str) -> bool:
        import torch

        saved = torch.load(path, weights_only=True)
        return set(saved) == set(self.params) and all(torch.equal(saved[n].cuda(), t) for n, t in self.params.items())

    def pull_wrong(self, ref: Any) -> str:
        import torch

        into = {name: torch.zeros(1, device="cuda") for name in ref.names}
        try:
            ref.get(into=into, timeout=30)
        except ValueError as exc:
            untouched = all(float(t.sum()) == 0.0 for t in into.values())
            return f"refused: {exc}" if untouched else "buffers written"
        return "accepted"

    def get_version(self) -> str:
        return self.version


def check(name: str, ok: bool, detail: str = "") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        raise SystemExit(1)


def run(mib: int, bench: bool) -> None:
    from runtime import RemoteError, spawn
    from runtime.collective import create_group

    peers = [spawn(GpuPeer, kwargs={"mib": mib, "seed": 1 + i}, name=f"gpu-peer-{i}",
                   env={"CUDA_VISIBLE_DEVICES": str(i)}) for i in range(2)]  # fmt: skip
    sender, receiver = peers
    try:
        create_group(peers, backend="nccl", name="gpu-weights", timeout_s=TIMEOUT_S)
        sums = [c.result(TIMEOUT_S) for c in [p.all_reduce("gpu-weights", float(i + 1)) for i, p in enumerate(peers)]]
        check("nccl all_reduce", sums == [3.0, 3.0], str(sums))
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "sender.pt")
            sender.save(path).result(TIMEOUT_S)
            check("receiver starts with other weights", not receiver.equals_file(path).result(TIMEOUT_S))
            refs = sender.put_buckets().result(TIMEOUT_S)
            freed = sender.wait_freed()
            started = time.monotonic()
            pulled = receiver.pull(refs, "v-nccl").result(TIMEOUT_S)
            took = time.monotonic() - started
            check("buckets pulled into the live parameters", pulled["moved_storage"] == 0, f"{pulled}, {took:.2f} s, "
                  f"{mib / 1024 / took:.2f} GiB/s")  # fmt: skip
            check("sender's wait_freed returned", freed.result(TIMEOUT_S) == "freed")
            check("version set explicitly", receiver.get_version().result(TIMEOUT_S) == "v-nccl")
            check("equal to a save/load round trip", receiver.equals_file(path).result(TIMEOUT_S))
        ref = sender.put_buckets().result(TIMEOUT_S)[0]
        answer = receiver.pull_wrong(ref).result(TIMEOUT_S)
        check("mismatched into refused before any byte moved", answer.startswith("refused"), answer[:160])
        ref = sender.put_buckets().result(TIMEOUT_S)[0]
        os.kill(sender.pid, signal.SIGSTOP)
        pulling = receiver.pull([ref], "never")
        time.sleep(0.5)
        started = time.monotonic()
        os.kill(sender.pid, signal.SIGKILL)
        try:
            pulling.result(60)
            check("owner death fails the receiver", False, "the pull succeeded")
        except RemoteError as exc:
            took = time.monotonic() - started
            died = exc.remote_type == "runtime.core.errors.ActorDied" and took < 30
            check("owner death fails the receiver with ActorDied", died, f"{exc.remote_type} after {took:.1f} s")
    finally:
        for peer in peers:
            peer.kill()
    has_nixl = importlib.util.find_spec("nixl") is not None
    print(f"skip NIXL: {'installed, but' if has_nixl else 'not installed;'} this build has no NIXL transport")
    if bench:
        subprocess.run([sys.executable, str(REPO / "bench" / "collective_bench.py"), "--backend", "nccl"],
                       check=True, timeout=600)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=256, help="size of the state dict moved (MiB)")
    parser.add_argument("--bench", action="store_true", help="then run bench/collective_bench.py --backend nccl")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        print("needs 2 CUDA GPUs (NCCL refuses two ranks on one GPU)")
        raise SystemExit(2)
    os.chdir(REPO)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    run(args.mib, args.bench)
    print("PASS")


if __name__ == "__main__":
    main()
