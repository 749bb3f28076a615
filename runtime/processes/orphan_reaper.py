"""Reap the orphans a spawning process inherits as a child subreaper, and only those: a process orphaned below one
of its actors while a spawn was under way (:mod:`runtime.processes.driver_fork`) is re-parented to it, and nobody
else waits for it."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
_PROC = Path("/proc")


def zombie_children(pid: int) -> list[tuple[int, int]]:
    """``(pid, session)`` of every zombie child of ``pid`` (read from /proc)."""
    found = []
    for child in _child_pids(pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (_PROC / str(child) / "stat").read_text()
            state, parent, _group, session = stat[stat.rindex(")") + 2 :].split()[:4]
            if state == "Z" and int(parent) == pid:
                found.append((child, int(session)))
    return found


def _child_pids(pid: int) -> set[int]:
    children: set[int] = set()
    try:
        for task in (_PROC / str(pid) / "task").iterdir():
            children.update(int(c) for c in (task / "children").read_text().split())
        return children
    except OSError:  # no /proc/<pid>/task/<tid>/children on this kernel: scan every process
        pass
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                    children.add(int(entry.name))
    return children


def reap_orphans() -> list[int]:
    """Reap this process's zombie children that it did not start; returns their pids.

    One it cannot have started is in another session than ours and does not lead it: a process cannot join an
    existing session, so a direct child is either in our session or the leader of its own (an actor, a Popen child
    with ``start_new_session``); those are left to whoever waits for them (ForkedWorker, ``subprocess``)."""
    own_pid, own_session = os.getpid(), os.getsid(0)
    reaped = []
    for child, session in zombie_children(own_pid):
        if session in (own_session, child):
            continue
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(child, os.WNOHANG)[0] == child:
                reaped.append(child)
                log.debug("reaped orphan pid %d (session %d) re-parented to this subreaper", child, session)
    return reaped


class OrphanReaper:
    """A daemon thread calling :func:`reap_orphans` every ``interval_s``; one per process."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="orphan-reaper", daemon=True)

    def start(self) -> OrphanReaper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                reap_orphans()
            except Exception:  # never let a /proc surprise end the thread silently
                log.exception("reaping orphans failed; trying again in %.1f s", self.interval_s)
