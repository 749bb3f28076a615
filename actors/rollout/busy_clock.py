"""Time during which at least one generation request was out at the engines (and they were not paused)."""

from __future__ import annotations

import time


class BusyClock:
    """``enter``/``leave`` around each request; ``pause``/``resume`` around weight updates."""

    def __init__(self) -> None:
        self._active = 0
        self._paused = False
        self._since: float | None = None
        self.busy_s = 0.0

    def enter(self) -> None:
        self._active += 1
        self._tick()

    def leave(self) -> None:
        self._active -= 1
        self._tick()

    def pause(self) -> None:
        self._paused = True
        self._tick()

    def resume(self) -> None:
        self._paused = False
        self._tick()

    def total(self) -> float:
        self._tick()
        return self.busy_s

    def _tick(self) -> None:
        now = time.monotonic()
        if self._since is not None:
            self.busy_s += now - self._since
        self._since = now if self._active > 0 and not self._paused else None
