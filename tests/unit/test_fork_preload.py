"""MILES_FORK_PRELOAD (runtime/processes/fork_server.py): which modules a fork server imports before it forks (what it
refuses to preload: tests/runtime/test_fork_spawn.py)."""

from __future__ import annotations

from runtime.processes.fork_server import preload_modules


def test_the_list_is_comma_separated_and_blanks_are_ignored() -> None:
    assert preload_modules({"MILES_FORK_PRELOAD": " torch, ,numpy,"}) == ["torch", "numpy"]
    assert preload_modules({}) == [] == preload_modules({"MILES_FORK_PRELOAD": " "})
