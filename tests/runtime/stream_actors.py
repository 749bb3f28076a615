"""Actors with generator methods, for the streaming tests (imported by their actor processes)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator

from runtime import method


class Producer:
    """Generator methods that record what they produced and whether they were closed, read on the control lane
    (the default lane is busy while a sync generator runs)."""

    def __init__(self) -> None:
        self.produced: dict[str, int] = {}
        self.closed: dict[str, bool] = {}
        self.gate = threading.Event()

    def count(self, n: int, tag: str = "count") -> Iterator[int]:
        self.produced[tag], self.closed[tag] = 0, False
        try:
            for i in range(n):
                self.produced[tag] += 1
                yield i
        finally:
            self.closed[tag] = True

    def gated(self) -> Iterator[str]:
        yield "before the gate"
        if not self.gate.wait(10.0):
            raise TimeoutError("the gate never opened")
        yield "after the gate"

    def fails_at(self, n: int) -> Iterator[int]:
        yield from range(n)
        raise ValueError(f"item {n} is bad")

    def wrong_type(self) -> Iterator[int]:
        yield 1
        yield "two"  # type: ignore[misc]

    async def acount(self, n: int, tag: str = "acount") -> AsyncIterator[int]:
        self.produced[tag], self.closed[tag] = 0, False
        try:
            for i in range(n):
                await asyncio.sleep(0)
                self.produced[tag] += 1
                yield i
        finally:
            self.closed[tag] = True

    async def astall(self, tag: str = "astall") -> AsyncIterator[int]:
        """Yields once, then waits long (a close cancels it where it waits)."""
        self.closed[tag] = False
        try:
            yield 0
            await asyncio.sleep(60)
            yield 1
        finally:
            self.closed[tag] = True

    async def afails(self) -> AsyncIterator[int]:
        yield 1
        raise KeyError("async failure")

    def plain(self, x: int) -> int:
        return x + 1

    @method(control_plane=True)
    def open_gate(self) -> None:
        self.gate.set()

    @method(control_plane=True)
    def state(self, tag: str) -> list:
        return [self.produced.get(tag, 0), self.closed.get(tag, False)]
