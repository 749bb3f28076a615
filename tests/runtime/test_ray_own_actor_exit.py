"""Ray's own tests/test_actor_failures.py (ray-project/ray python/ray/tests, the version that imports
``ray._common.test_utils``; Apache-2.0): its ``exit_actor`` tests, ported (the rest of the file, and what stays out,
in test_ray_own_actor_failures.py): test_exit_actor_invalid_usage_error,
test_exit_actor_normal_actor_raise_immediately, test_exit_actor_normal_actor_in_constructor_should_exit,
test_exit_actor_async_actor_raise_immediately. Ray's ``time.sleep(3)`` before checking that code after
``exit_actor()`` did not run is 0.5 s.
"""

from __future__ import annotations

import atexit
import time

import pytest
from ray_own_actors import wait_for_condition

import runtime.ray_compat as ray
from runtime.ray_compat.actor import exit_actor

pytestmark = [pytest.mark.usefixtures("ray_start_regular_shared"), pytest.mark.processes]


def test_exit_actor_invalid_usage_error():
    """test_actor_failures.py::test_exit_actor_invalid_usage_error."""
    with pytest.raises(TypeError, match="exit_actor API is called on a non-actor worker"):
        exit_actor()

    @ray.remote
    def f():
        exit_actor()

    with pytest.raises(TypeError, match="exit_actor API is called on a non-actor worker"):
        ray.get(f.remote())


def test_exit_actor_normal_actor_raise_immediately(tmp_path):
    """test_actor_failures.py::test_exit_actor_normal_actor_raise_immediately."""
    temp_file_atexit = tmp_path / "atexit.log"
    temp_file_after_exit_actor = tmp_path / "after_exit_actor.log"
    assert not temp_file_atexit.exists()
    assert not temp_file_after_exit_actor.exists()

    @ray.remote
    class Actor:
        def __init__(self):
            def f():
                temp_file_atexit.touch()

            atexit.register(f)

        def exit(self):
            exit_actor()
            # The following code should not be executed.
            temp_file_after_exit_actor.touch()

    a = Actor.remote()
    ray.get(a.__ray_ready__.remote())
    with pytest.raises(ray.exceptions.RayActorError) as exc_info:
        ray.get(a.exit.remote())
    assert "exit_actor()" in str(exc_info.value)

    def verify():
        return temp_file_atexit.exists()

    wait_for_condition(verify)
    time.sleep(0.5)
    assert not temp_file_after_exit_actor.exists()


def test_exit_actor_normal_actor_in_constructor_should_exit(tmp_path):
    """test_actor_failures.py::test_exit_actor_normal_actor_in_constructor_should_exit."""
    temp_file_atexit = tmp_path / "atexit.log"
    temp_file_after_exit_actor = tmp_path / "after_exit_actor.log"
    assert not temp_file_atexit.exists()
    assert not temp_file_after_exit_actor.exists()

    @ray.remote
    class Actor:
        def __init__(self):
            def f():
                temp_file_atexit.touch()

            atexit.register(f)
            exit_actor()
            # The following code should not be executed.
            temp_file_after_exit_actor.touch()

    a = Actor.remote()  # noqa: F841 # Need to preserve the reference.

    def verify():
        return temp_file_atexit.exists()

    wait_for_condition(verify)
    time.sleep(0.5)
    assert not temp_file_after_exit_actor.exists()


def test_exit_actor_async_actor_raise_immediately(tmp_path):
    """test_actor_failures.py::test_exit_actor_async_actor_raise_immediately."""
    temp_file_atexit = tmp_path / "atexit.log"
    temp_file_after_exit_actor = tmp_path / "after_exit_actor.log"
    assert not temp_file_atexit.exists()
    assert not temp_file_after_exit_actor.exists()

    @ray.remote
    class AsyncActor:
        def __init__(self):
            def f():
                temp_file_atexit.touch()

            atexit.register(f)

        async def exit(self):
            exit_actor()
            # The following code should not be executed.
            temp_file_after_exit_actor.touch()

    a = AsyncActor.remote()
    ray.get(a.__ray_ready__.remote())

    try:
        ray.get(a.exit.remote())
    except Exception:
        pass

    with pytest.raises(ray.exceptions.RayActorError) as exc_info:
        ray.get(a.exit.remote())
    assert (
        # Exited when task execution returns
        "exit_actor()" in str(exc_info.value)
        # Exited during periodical check in worker
        or "User requested to exit the actor" in str(exc_info.value)
    )

    def verify():
        return temp_file_atexit.exists()

    wait_for_condition(verify)
    time.sleep(0.5)
    assert not temp_file_after_exit_actor.exists()
