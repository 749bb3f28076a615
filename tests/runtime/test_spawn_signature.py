"""``spawn`` has ``spawn_async``'s typed signature (issue 43 item 5): a mistyped option is refused before any process
starts, naming the option and the closest real one."""

from __future__ import annotations

import inspect

import pytest

from runtime import spawn
from runtime.processes.spawn import spawn_async


def test_spawn_shows_every_option_of_spawn_async() -> None:
    assert inspect.signature(spawn) == inspect.signature(spawn_async)
    assert spawn.__name__ == "spawn" and "max_restarts" in inspect.signature(spawn).parameters


def test_a_mistyped_option_is_refused_with_the_one_meant() -> None:
    with pytest.raises(TypeError, match=r"spawn\(\): got an unexpected keyword argument 'max_restart' \(did you "
                                        r"mean 'max_restarts'\?\)"):  # fmt: skip
        spawn("sample_actors:Counter", max_restart=2)
    with pytest.raises(TypeError, match="missing a required argument: 'actor_class'"):
        spawn()  # type: ignore[call-arg]
