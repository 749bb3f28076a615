"""The console between "ready N/N" and the job: constructed k/n per pool, the slowest pending actor and its time."""

from __future__ import annotations

import re
import threading

from launcher.launch.construction_progress import ConstructionProgress


def test_counts_per_pool_and_names_the_slowest_pending() -> None:
    said: list[str] = []
    heard = threading.Event()

    def say(message: str, level: int = 0) -> None:
        said.append(message)
        heard.set()

    workers = [("trainer", "trainer-0-0"), ("trainer", "trainer-0-1"), ("rollout", "rollout-0-0")]
    with ConstructionProgress(workers, say, interval_s=0.05) as progress:
        progress.constructed("rollout", "rollout-0-0")
        progress.constructed("trainer", "trainer-0-1")
        assert heard.wait(5)
        ticks = [line for line in said if line.startswith("constructing")]
        assert re.fullmatch(r"constructing 3 actor\(s\): trainer 1/2, rollout 1/1; slowest: trainer-0-0 \(\d+\.\ds\)",
                            ticks[-1]), ticks  # fmt: skip
        progress.constructed("trainer", "trainer-0-0")
    assert any(re.fullmatch(r"pool trainer: constructed 2/2 in \d+\.\ds", line) for line in said), said
    assert not any(line.startswith("pool rollout") for line in said)  # one-actor pools: the tick line is enough
    assert progress.summary() == "constructing 3 actor(s): trainer 2/2, rollout 1/1"
    count = len(said)
    threading.Event().wait(0.2)
    assert len(said) == count, "the ticker stops with the block"
