"""Fixtures for the attack tests: a live actor to aim at, killed afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runtime import ActorHandle, spawn


@pytest.fixture
def target(no_leaks: None) -> Iterator[ActorHandle]:
    """An ``attack_actors:Target`` in its own process."""
    handle = spawn("attack_actors:Target", name="target")
    try:
        yield handle
    finally:
        handle.kill()
