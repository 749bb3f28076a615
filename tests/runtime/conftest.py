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


def _ray_session(num_cpus: int) -> Iterator[None]:
    import runtime.ray_compat as ray

    ray.init(num_cpus=num_cpus)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def ray_session_2cpu() -> Iterator[None]:
    """A runtime.ray_compat session of two CPUs, shared by a module's tests (``pytestmark``)."""
    yield from _ray_session(2)


@pytest.fixture(scope="module")
def ray_start_regular_shared() -> Iterator[None]:
    """Ray's fixture of that name (python/ray/tests/conftest.py): one session of 4 CPUs for a module's tests, used
    by the modules that port Ray's own tests (``pytestmark``)."""
    yield from _ray_session(4)
