"""Fixtures for runtime tests: a Counter actor in its own process, killed after the test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runtime import ActorHandle, spawn


@pytest.fixture
def counter(no_leaks: None) -> Iterator[ActorHandle]:
    handle = spawn("sample_actors:Counter", kwargs={"start": 10}, name="counter")
    try:
        yield handle
    finally:
        handle.kill()
