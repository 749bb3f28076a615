"""Progress while the actors' constructors run (between "ready N/N" and "attached N actor(s)"): constructors can
take many seconds (a trainer imports torch and Megatron and joins its process group), so the console says why."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from launcher.console.progress import Say


class ConstructionProgress:
    """Counts constructed actors per pool and reports them through ``say``.

    One line per pool as its last actor is constructed, and every ``interval_s`` while any is pending, the count
    per pool and the slowest actor still pending::

        constructing 5 actor(s): trainer 0/2, inference 1/1, rollout 0/1, dashboard 1/1; slowest: trainer-0-1 (4.0s)
        pool trainer: constructed 2/2 in 9.3s

    An actor that fails to construct is said at once (its pool shows ``failed``); the start stops there
    (launcher/launch/actor_construction.py)::

        constructing 5 actor(s): trainer 0/2, inference 0/1 failed (inference-0-0 after 0.4s), rollout 0/1, ...
    """

    def __init__(self, worker_ids: Sequence[tuple[str, str]], say: Say, *, interval_s: float = 2.0) -> None:
        """``worker_ids``: (pool id, worker id) of every actor being constructed."""
        self._pools: dict[str, list[str]] = {}
        for pool, worker in worker_ids:
            self._pools.setdefault(pool, []).append(worker)
        self._done: set[str] = set()
        self._failed: dict[str, float] = {}  # worker -> seconds after the start it failed
        self._say = say
        self._interval_s = interval_s
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ConstructionProgress:
        self._thread = threading.Thread(target=self._tick, name="construct-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def constructed(self, pool: str, worker: str) -> None:
        """``worker`` of ``pool`` is constructed (its pool's line is said when it is the pool's last)."""
        with self._lock:
            self._done.add(worker)
            members = self._pools.get(pool, [])
            complete = len(members) > 1 and all(w in self._done for w in members)
        if complete:
            self._say(f"pool {pool}: constructed {len(members)}/{len(members)} in {self._elapsed():.1f}s")

    def failed(self, pool: str, worker: str) -> None:
        """``worker`` of ``pool`` failed to construct: said at once, its pool shown ``failed`` from now on."""
        with self._lock:
            self._failed.setdefault(worker, self._elapsed())
        self._say(self.summary())

    def summary(self) -> str:
        """``constructing N actor(s): pool k/n[ failed (worker after s)], ...; slowest: worker (elapsed)``."""
        with self._lock:
            counts = [f"{pool} {sum(w in self._done for w in ws)}/{len(ws)}{self._failures(ws)}"
                      for pool, ws in self._pools.items()]  # fmt: skip
            pending = [w for ws in self._pools.values() for w in ws if w not in self._done and w not in self._failed]
            total = sum(len(ws) for ws in self._pools.values())
        slowest = f"; slowest: {pending[0]} ({self._elapsed():.1f}s)" if pending and not self._failed else ""
        return f"constructing {total} actor(s): {', '.join(counts)}{slowest}"

    def _failures(self, workers: list[str]) -> str:
        failed = [f"{w} after {self._failed[w]:.1f}s" for w in workers if w in self._failed]
        return f" failed ({', '.join(failed)})" if failed else ""

    def _elapsed(self) -> float:
        return time.monotonic() - self._started

    def _tick(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._say(self.summary())
