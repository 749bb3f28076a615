"""Actor classes the attack tests aim at (importable by dotted path in the actor processes)."""

from __future__ import annotations

import collections
import time
from typing import Any


class Target:
    """Counts what ran, so a test can tell that an attacker's message ran nothing."""

    def __init__(self, *, label: str = "target") -> None:
        self.label = label
        self.hits: collections.Counter[int] = collections.Counter()

    def hit(self, key: int) -> int:
        self.hits[key] += 1
        return key

    def counts(self) -> dict[int, int]:
        return dict(self.hits)

    def slow(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    def echo(self, data: bytes) -> bytes:
        return data

    def count(self, items: list) -> int:
        return len(items)

    def keep(self, value: Any) -> str:
        return type(value).__name__
