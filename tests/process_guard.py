"""The ``processes`` marker: tests that start processes say so, and ``pytest -m "not processes"`` is the fast loop.

A module whose tests start processes (actors, launchers, sshd, Prometheus, Slurm, a subprocess of any kind) sets
``pytestmark = pytest.mark.processes``. When a run holds no test with the marker (``-m "not processes"``, or a
run of unit tests only) nothing of an earlier test can still be starting processes, so the marker is checked: a
test that starts one anyway fails at that moment with the fix. Processes are seen where they start in this
process (an audit hook: Popen, fork, posix_spawn, os.system) and where the fork server is asked for an actor.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from runtime.processes import driver_fork

MARKER = "processes"
_STARTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system"})
_FIX = f'mark its module `pytestmark = pytest.mark.{MARKER}` (README, "Running the tests")'


class _Guard:
    """Whether starting a process is refused now, and the test it is refused in."""

    test: str | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _Guard.test is not None and event in _STARTS:
        raise RuntimeError(f"{_Guard.test} starts a process ({event} {args[:2]!r}) but is not marked: {_FIX}")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check the marker only where no marked test runs (their processes may outlive them)."""
    if items and not any(item.get_closest_marker(MARKER) for item in items):
        config.stash[_checked] = True
        sys.addaudithook(_audit)
        forked = driver_fork.fork_worker

        def fork_worker(*args: Any, **kwargs: Any) -> Any:
            if _Guard.test is not None:
                raise RuntimeError(f"{_Guard.test} spawns an actor but is not marked: {_FIX}")
            return forked(*args, **kwargs)

        driver_fork.fork_worker = fork_worker  # type: ignore[assignment]


_checked = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    if not item.config.stash.get(_checked, False):
        return (yield)
    _Guard.test = item.nodeid
    try:
        return (yield)
    finally:
        _Guard.test = None
