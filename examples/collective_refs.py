"""Direct tensor transport between two actors: a collective group, a device-resident ref, a pull into live
buffers, free and wait_freed (README "Collective groups and direct tensor transport").

    .venv/bin/python examples/collective_refs.py

Prints the bytes moved, the time and whether the receiver's weights equal the sender's.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import runtime
from runtime import TensorRef, collective


class Trainer:
    """Holds weights; publishes them as a collective ref and waits until every reader freed it."""

    def __init__(self) -> None:
        self.weights = {f"layer{i}.weight": torch.randn(1024, 1024) for i in range(8)}  # 32 MiB
        self.ref: TensorRef | None = None

    def publish(self, readers: int) -> TensorRef:
        self.ref = runtime.put(self.weights, transport="collective", readers=readers)
        return self.ref

    async def wait_freed(self, timeout: float) -> bool:
        await asyncio.to_thread(collective.wait_freed, [self.ref], timeout)  # then self.weights may change
        return True

    def checksum(self) -> float:
        return float(sum(t.double().sum() for t in self.weights.values()))


class Engine:
    """Has its own live weights and pulls new values straight into them."""

    def __init__(self) -> None:
        self.weights = {f"layer{i}.weight": torch.zeros(1024, 1024) for i in range(8)}

    def pull(self, ref: TensorRef) -> float:
        started = time.perf_counter()
        ref.get(into=self.weights, timeout=60)
        ref.free()
        return time.perf_counter() - started

    def checksum(self) -> float:
        return float(sum(t.double().sum() for t in self.weights.values()))


def main() -> None:
    trainer, engine = runtime.spawn(Trainer, name="trainer"), runtime.spawn(Engine, name="engine")
    try:
        group = collective.create_group([trainer, engine], backend="gloo", name="weights", timeout_s=60)
        ref = trainer.publish(1).result(60)
        freed = trainer.wait_freed(60)
        took = engine.pull(ref).result(60)
        print(f"moved {ref.nbytes / 2**20:.0f} MiB in {took * 1e3:.1f} ms; freed: {freed.result(60)}; "
              f"equal: {trainer.checksum().result(60) == engine.checksum().result(60)}")  # fmt: skip
        collective.destroy_group(group)
    finally:
        trainer.kill()
        engine.kill()


if __name__ == "__main__":
    main()
