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


@pytest.fixture(scope="module")
def ray_session_2cpu() -> Iterator[None]:
    """A runtime.ray_compat session of two CPUs, shared by a module's tests (``pytestmark``)."""
    import runtime.ray_compat as ray

    ray.init(num_cpus=2)
    try:
        yield
    finally:
        ray.shutdown()
