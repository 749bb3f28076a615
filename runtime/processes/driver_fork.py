"""The fork server of a process that calls ``spawn``: one per process, started by its first spawn, so that an actor
process starts in milliseconds instead of importing the runtime afresh (the driver itself never forks)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from runtime.processes.fork_client import ForkClient, ForkedWorker, become_subreaper
from runtime.processes.orphan_reaper import OrphanReaper
from transport import session_secret

log = logging.getLogger(__name__)

ENABLE_ENV = "MILES_SPAWN_FORK_SERVER"

_lock = threading.Lock()
_client: ForkClient | None = None
_owner_pid = 0  # the process _client belongs to: a child forked from us must start its own
_window_lock = threading.Lock()
_forking = 0  # spawns under way (this process is a child subreaper while there is one)


def child_environment(extra: dict[str, str] | None) -> dict[str, str]:
    """Our environment plus our import path (so classes importable here are importable there) and ``extra``.

    It carries our session secret (drawn now if we had none), so a driver's tree shares one: pickled values
    travel within it (:mod:`transport.sealed_pickle`)."""
    session_secret.ensure()
    env = dict(os.environ)
    paths = [p for p in [os.getcwd(), *sys.path] if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def client() -> ForkClient | None:
    """This process's fork server client, started on the first call (from this thread); None when disabled.

    Where the fork server cannot serve (``MILES_SPAWN_FORK_SERVER=0``, another environment than the one it imported
    with, it cannot start or it died: restarted once, then off), the actor process starts with ``Popen`` and the
    reason is logged. The first spawn waits for it (``prepare_async``, off the loop); later ones take milliseconds."""
    global _client, _owner_pid
    with _lock:
        if _owner_pid != os.getpid():
            _client, _owner_pid = None, os.getpid()
            if os.environ.get(ENABLE_ENV, "1") == "0":
                return None
            if not become_subreaper():
                log.info("cannot become a child subreaper here; actor processes start with Popen")
                return None
            become_subreaper(False)  # it can: from now on only while a spawn is under way
            OrphanReaper().start()  # what is orphaned below our actors in such a window comes to us
            _client = ForkClient(os.getpid(), death_signal=False, env=child_environment(None))
            _client.start()
        return _client if _client is not None and _client.enabled else None


def server_pid() -> int | None:
    """The pid of this process's fork server, if it has one running."""
    with _lock:
        forks = _client if _owner_pid == os.getpid() else None
    return forks.pid if forks is not None and forks.enabled and forks.sock is not None else None


async def prepare_async() -> None:
    """Start the fork server if need be and wait (off the loop, bounded) until it is ready or given up."""
    forks = client()
    if forks is not None and not forks.ready:
        await asyncio.get_running_loop().run_in_executor(None, forks.await_ready)


def fork_worker(argv: list[str], env: dict[str, str], cwd: str | None) -> ForkedWorker | None:
    """An actor process for ``argv`` forked by the fork server (stdin, and stdout and stderr merged, as text
    pipes), or None: start it with Popen."""
    forks = client()
    if forks is None:
        return None
    with subreaper_while_forking():
        return forks.spawn(argv, env, Path(cwd or os.getcwd()), stdin=True, merge_stderr=True, text=True)


@contextlib.contextmanager
def subreaper_while_forking() -> Iterator[None]:
    """This process is a child subreaper while any thread is inside (the fork server's double-forked worker is
    re-parented to it before the spawn returns).

    Supervision is then as for a Popen child: this process waits for the actor's exit, and the actor's own
    ``--parent-pid``/``--watch-pid`` make it die with this process (or, detached, with the one it lives no longer
    than). Outside these milliseconds, what is orphaned below the actors (an engine a controller started, a
    daemonised helper) goes to init as below a Popen child; what comes in a window and exits is reaped by
    :mod:`runtime.processes.orphan_reaper`."""
    global _forking
    with _window_lock:
        _forking += 1
        if _forking == 1:
            become_subreaper(True)
    try:
        yield
    finally:
        with _window_lock:
            _forking -= 1
            if _forking == 0:
                become_subreaper(False)
