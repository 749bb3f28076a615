"""Ray parity: handles that pickle, named actors, namespaces, get_if_exists, detached lifetimes.

Ray sources read: python/ray/actor.py (ActorHandle.__reduce__ via _serialization_helper; ActorClass.options with
name/namespace/get_if_exists/lifetime="detached"), python/ray/_private/worker.py (get_actor), and the behaviour
tested in python/ray/tests/test_actor.py / test_actor_lifetime.py / test_namespace.py: a taken name raises
ValueError, get_if_exists returns the live actor, names are scoped by namespace, a detached actor outlives its
owner. Real actor processes throughout.
"""

from __future__ import annotations

import os
import pickle
import signal
import time
from collections.abc import Iterator

import cloudpickle
import psutil
import pytest

from runtime import ActorHandle, ActorNotFound, CallRejected, get_actor, spawn

pytestmark = pytest.mark.processes


@pytest.fixture
def relay(no_leaks: None) -> Iterator[ActorHandle]:
    handle = spawn("ray_parity_actors:Relay")
    try:
        yield handle
    finally:
        handle.kill()


def test_a_handle_survives_pickle_and_cloudpickle_and_reaches_the_same_actor(relay: ActorHandle) -> None:
    counter = spawn("sample_actors:Counter", kwargs={"start": 5}, max_restarts=1)  # a supervisor: not picklable
    try:
        for dumps in (pickle.dumps, cloudpickle.dumps):
            blob = dumps(counter)
            assert relay.call_pickled(blob, 1).result(10) in (6, 7)  # reached from another process
            copy = pickle.loads(blob)
            assert copy.endpoint == counter.endpoint and copy.server_key == counter.server_key
        assert counter.add(0).result(10) == 7
        # The copy never carries the spawn token: it can call methods, not kill.
        assert copy.spawn_token is None and copy.owner is None and copy.process is None
        assert relay.kill_pickled(pickle.dumps(counter)).result(10).startswith("refused: ")
        with pytest.raises(CallRejected, match="can be killed only by the process that spawned"):
            copy.kill()
        assert counter.add(0).result(10) == 7  # still alive
    finally:
        counter.kill()


def test_get_actor_works_inside_actors_of_the_same_driver_without_environment(relay: ActorHandle) -> None:
    assert "MILES_ACTOR_REGISTRY" not in os.environ  # the driver has no registry set up by hand
    counter = spawn("sample_actors:Counter", kwargs={"start": 100}, name="parity-named")
    try:
        assert relay.add_by_name("parity-named", "", 1).result(10) == 101
        # ... and a name an actor registers is found by the driver and by other actors.
        relay.spawn_named("parity-grandchild", "").result(30)
        assert get_actor("parity-grandchild").add(2).result(10) == 2
        assert relay.add_by_name("parity-grandchild", "", 3).result(10) == 5
    finally:
        counter.kill()
    with pytest.raises(ActorNotFound, match="no actor named 'nobody'") as info:
        get_actor("nobody")
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)  # ours, and Ray's type


def test_a_taken_name_raises_and_get_if_exists_returns_the_live_actor(no_leaks: None) -> None:
    first = spawn("sample_actors:Counter", kwargs={"start": 1}, name="parity-taken")
    try:
        with pytest.raises(ValueError, match="'parity-taken' is taken by a live actor"):
            spawn("sample_actors:Counter", kwargs={"start": 2}, name="parity-taken")
        same = spawn("sample_actors:Counter", kwargs={"start": 3}, name="parity-taken", get_if_exists=True)
        assert same.endpoint == first.endpoint and same.add(0).result(10) == 1
        assert get_actor("parity-taken").add(0).result(10) == 1  # the first one still holds the name
    finally:
        first.kill()
    # Once its holder is gone, the name is free again.
    second = spawn("sample_actors:Counter", kwargs={"start": 4}, name="parity-taken")
    try:
        assert get_actor("parity-taken").add(0).result(10) == 4
    finally:
        second.kill()


def test_a_name_held_by_an_actor_that_died_may_be_taken_again(relay: ActorHandle) -> None:
    relay.spawn_named("parity-orphaned-name", "").result(30)  # registered by the relay's process
    held = get_actor("parity-orphaned-name")
    os.kill(held.pid, signal.SIGKILL)
    fresh = spawn("sample_actors:Counter", kwargs={"start": 9}, name="parity-orphaned-name")
    try:
        assert get_actor("parity-orphaned-name").add(0).result(10) == 9
    finally:
        fresh.kill()


def test_namespaces_scope_names(relay: ActorHandle) -> None:
    blue = spawn("sample_actors:Counter", kwargs={"start": 10}, name="parity-ns", namespace="blue")
    green = spawn("sample_actors:Counter", kwargs={"start": 20}, name="parity-ns", namespace="green")
    try:
        assert get_actor("parity-ns", namespace="blue").add(0).result(10) == 10
        assert get_actor("parity-ns", namespace="green").add(0).result(10) == 20
        assert relay.add_by_name("parity-ns", "green", 1).result(10) == 21
        with pytest.raises(ActorNotFound):
            get_actor("parity-ns")  # not in the default namespace
        with pytest.raises(ValueError, match="in namespace 'blue'"):
            spawn("sample_actors:Counter", name="parity-ns", namespace="blue")
    finally:
        blue.kill()
        green.kill()
    with pytest.raises(ValueError, match="is not allowed"):
        spawn("sample_actors:Counter", name="../escape")


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.1)
    return False


def test_a_detached_child_outlives_its_owner_and_a_default_one_dies_with_it(no_leaks: None) -> None:
    owner = spawn("ray_parity_actors:Relay")
    detached_pid = 0
    try:
        detached_pid = owner.spawn_named("parity-detached", "detached").result(30)
        attached_pid = owner.spawn_named("parity-attached", "").result(30)
        owner.kill()  # SIGKILL: no goodbye
        assert _gone(attached_pid, 10), "a default (non-detached) child must die with its owner"
        assert not _gone(detached_pid, 2), "a detached child must outlive its owner"
        survivor = get_actor("parity-detached")
        assert survivor.add(5).result(10) == 5  # found by name, and serving
    finally:
        owner.kill()
        if detached_pid and psutil.pid_exists(detached_pid):
            os.kill(detached_pid, signal.SIGKILL)  # it lives as long as this (driver) process otherwise


def test_a_detached_child_still_dies_with_the_driver(tmp_path: object, no_leaks: None) -> None:
    """No orphans: the process a detached actor lives no longer than is its owner's owner (here: a driver)."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import sys
        from runtime import spawn
        owner = spawn("ray_parity_actors:Relay")
        print(owner.spawn_named("parity-detached-2", "detached").result(30), flush=True)
        sys.stdin.readline()
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), *sys.path])}
    driver = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        pid = int(driver.stdout.readline())
        assert psutil.pid_exists(pid)
        driver.kill()  # the driver dies without cleaning up
        driver.wait(10)
        assert _gone(pid, 10), "a detached actor must not outlive the driver of its tree"
    finally:
        driver.kill()
        driver.wait(10)
