"""A process and its descendants, remembered across reparenting, and how to stop a set of them."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time

import psutil

log = logging.getLogger(__name__)


class ProcessTree:
    """A root pid (identified by pid + create_time) plus every descendant seen so far.

    Descendants are snapshotted on ``refresh()`` so that grandchildren reparented away from the root (double
    fork, dead intermediate parent) are still known when the tree is stopped. A root that leads its own process
    group (``start_new_session``) also gets the whole group signalled.
    """

    def __init__(self, pid: int, create_time: float | None = None) -> None:
        self.pid = pid
        self.create_time = create_time if create_time is not None else _create_time(pid)
        self.known: dict[int, float] = {pid: self.create_time} if self.create_time is not None else {}
        try:
            pgid = os.getpgid(pid)
        except OSError:
            pgid = None
        self.own_group = pgid == pid and pgid != os.getpgrp()
        self.refresh()

    def refresh(self) -> None:
        """Remember the current descendants of every live member."""
        for proc in self.members(refresh=False):
            with contextlib.suppress(psutil.Error):
                for child in proc.children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        self.known.setdefault(child.pid, child.create_time())

    def adopt(self, pid: int, create_time: float) -> None:
        """Count a process (e.g. an orphan reparented away from the root) as part of this tree."""
        self.known.setdefault(pid, create_time)

    def members(self, *, refresh: bool = True) -> list[psutil.Process]:
        """Live processes of the tree (pid reuse is ruled out by create_time)."""
        if refresh:
            self.refresh()
        alive = []
        for pid, created in list(self.known.items()):
            try:
                proc = psutil.Process(pid)
                if abs(proc.create_time() - created) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.Error:
                self.known.pop(pid, None)
        return alive

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the root's group (if it owns one) and to every known live member."""
        if self.own_group:
            with contextlib.suppress(OSError):
                os.killpg(self.pid, sig)
        for proc in self.members():
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def terminate_trees(trees: list[ProcessTree], grace_s: float) -> list[int]:
    """SIGTERM every tree, wait up to ``grace_s``, SIGKILL what is left; returns pids that had to be killed."""
    for tree in trees:
        tree.refresh()
        tree.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not any(tree.members() for tree in trees):
            return []
        time.sleep(0.05)
    killed = []
    for tree in trees:
        members = tree.members()
        killed += [p.pid for p in members]
        tree.signal(signal.SIGKILL)
    if killed:
        log.warning("SIGKILLed %d process(es) still alive %.1fs after SIGTERM: %s", len(killed), grace_s, killed)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(tree.members() for tree in trees):
        time.sleep(0.05)
    return killed
