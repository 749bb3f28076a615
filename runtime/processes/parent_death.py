"""A child that dies with its parent: Linux's PR_SET_PDEATHSIG, set and then checked (elsewhere than Linux nothing is
set; the checks still run)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1

Prctl = Callable[..., int]


def _prctl() -> Prctl | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL, *, prctl: Prctl | None = None) -> bool:
    """Ask for ``sig`` when the parent dies; False when ``parent_pid`` is no longer our parent (it died first).

    The signal comes when the *thread* that forked the child exits, not the process: fork from a long-lived thread.
    Setting it races the parent's own death, hence the check of the parent afterwards."""
    prctl = prctl or _prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    return os.getppid() == parent_pid


def die_with_parent_preexec(parent_pid: int | None = None, sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` doing :func:`die_with_parent` in the child (``parent_pid``: default this process), which
    exits at once if the parent is already gone; None where there is no PR_SET_PDEATHSIG."""
    prctl = _prctl()  # resolved before fork: the child only calls it
    if prctl is None:
        return None
    parent = os.getpid() if parent_pid is None else parent_pid

    def setup() -> None:
        if not die_with_parent(parent, sig, prctl=prctl):
            os._exit(1)

    return setup
