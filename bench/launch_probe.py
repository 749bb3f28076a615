"""The actor launch_bench.py starts: a module of its own that imports nothing, so a worker constructing it pays
for no launcher import (launch_bench.py imports the launcher and the SSH provider)."""

from __future__ import annotations


class Probe:
    """The benchmarked actor: constructed, then pinged once."""

    def __init__(self, *, index: int = 0) -> None:
        self.index = index

    def ping(self) -> int:
        """Answer."""
        return self.index
