"""What real Ray client code (verl's single controller, slime) needs of runtime.ray_compat (issue 41): Ray's module
names under ``import ray``, its actor-class behaviour, ``.remote()`` returning before construction, actors ending
with their handles, exceptions keeping their fields, ``ray.util.collective``.

Ray sources read: python/ray/actor.py (ActorClass derived from the user's class; ``__ray_ready__``,
``__ray_terminate__``), python/ray/util/state/api.py, python/ray/util/collective/collective.py,
python/ray/exceptions.py (RayTaskError keeps the cause's fields).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
from ray_client_actors import BrokenInit, CodedError, Placer, Reducer, Rendezvous, Slow, Worker

import runtime.ray_compat as ray
from runtime.ray_compat.as_ray import SHIM_DIR, install_as_ray
from runtime.ray_compat.exceptions import ActorDiedError, RayTaskError
from runtime.ray_compat.util.scheduling_strategies import PlacementGroupSchedulingStrategy

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def session() -> Iterator[None]:
    ray.init(num_cpus=8, num_gpus=2)
    try:
        yield
    finally:
        ray.shutdown()


def test_import_ray_is_ray_compat_with_its_submodules() -> None:
    """verl's base.py imports ray.experimental.state.api, ray.util.placement_group and scheduling_strategies at
    the top; slime calls ray._private.services; the modules are ray_compat's own (one class, never loaded twice),
    and a Ray module that is not provided fails naming what to read."""
    install_as_ray()
    import ray as aliased
    import ray._private.services
    import ray.experimental.state.api
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy as Strategy

    assert aliased is ray
    assert Strategy is PlacementGroupSchedulingStrategy
    assert aliased.util.placement_group is placement_group  # the function, as in Ray, not the module
    assert sys.modules["ray.util.placement_group"] is sys.modules["runtime.ray_compat.util.placement_group"]
    assert aliased._private.services.get_node_ip_address() == aliased.util.get_node_ip_address() == "127.0.0.1"
    assert callable(aliased.experimental.state.api.get_actor)
    assert aliased.cloudpickle.loads(aliased.cloudpickle.dumps(lambda: 3))() == 3
    with pytest.raises(ModuleNotFoundError, match=r"No module named 'ray\.dag'.*does not provide it"):
        import ray.dag


def test_processes_started_outside_get_it_from_pythonpath(tmp_path: Path) -> None:
    """A plain ``python`` with the shim directory first on PYTHONPATH (``python -m runtime.ray_compat.as_ray``
    prints it) imports Ray code unchanged."""
    printed = subprocess.run([sys.executable, "-m", "runtime.ray_compat.as_ray"], capture_output=True, text=True,
                             check=True, cwd=ROOT)  # fmt: skip
    assert printed.stdout.strip() == SHIM_DIR
    script = textwrap.dedent("""
        import ray
        from ray.util.placement_group import placement_group
        ray.init(num_cpus=1)
        print(ray.__name__, placement_group.__module__)
        ray.shutdown()
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SHIM_DIR, str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.split() == ["runtime.ray_compat", "runtime.ray_compat.placement"], done.stderr


def test_actor_class_is_the_users_class(session: None) -> None:
    """verl binds worker-group methods by walking dir() of the @ray.remote class and reading their attributes."""
    actor_class = ray.remote(Worker)
    assert type(actor_class).__name__ == "ActorClass(Worker)"  # verl parses the name out of this
    assert isinstance(actor_class, ray.actor.ActorClass)
    assert {"method", "_query_dispatch_info", "helper", "dispatch_mode"} <= set(dir(actor_class))
    assert actor_class.dispatch_mode == "ONE_TO_ALL" and actor_class.registry == {"workers": 1}
    assert actor_class.helper(1) == 2
    assert actor_class.__ray_actor_class__ is Worker
    with pytest.raises(TypeError, match=r"Instead of 'Worker\(\)', use 'Worker\.remote\(\)'"):
        actor_class()


def test_private_methods_star_args_and_no_reserved_names(session: None) -> None:
    handle = ray.remote(Worker).remote(1, 2, role="actor")
    assert ray.get(handle._query_dispatch_info.remote(), timeout=30) == {"args": [1, 2], "kwargs": {"role": "actor"}}
    assert ray.get(handle.method.remote("x")) == "method x"  # `method` is the actor's, not the handle's
    assert ray.get(handle.kill.remote()) == "not the handle's kill"
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        handle.nope  # noqa: B018


def test_remote_returns_before_the_constructor_runs_and_calls_queue_behind_it(session: None, tmp_path) -> None:
    """Two constructors that each wait for the other: Ray's .remote() returns at once, so both run; a .remote()
    that waited for its constructor would deadlock here."""
    cls = ray.remote(Rendezvous)
    started = time.monotonic()
    first = cls.remote("a", "b", str(tmp_path))
    assert time.monotonic() - started < 5
    calls = [first.name.remote() for _ in range(3)]  # queued behind construction, sent in order
    second = cls.remote("b", "a", str(tmp_path))
    assert ray.get([*calls, second.name.remote()], timeout=60) == ["a", "a", "a", "b"]
    assert ray.get(first.__ray_ready__.remote()) is True


def test_a_failed_constructor_fails_its_calls_with_the_cause(session: None) -> None:
    handle = ray.remote(BrokenInit).remote()  # returns: the constructor runs in the background
    with pytest.raises(ActorDiedError, match=r"BrokenInit died because of an error raised in its creation.*no GPU"):
        ray.get(handle.ping.remote(), timeout=30)
    with pytest.raises(ActorDiedError):
        ray.get(handle.__ray_ready__.remote(), timeout=30)
    with pytest.raises(TypeError, match=r"BrokenInit\.remote\(\): too many positional arguments"):
        ray.remote(BrokenInit).remote(1)  # a bad call still raises at once


def test_exceptions_keep_the_fields_of_their_cause(session: None) -> None:
    handle = ray.remote(Worker).remote()
    with pytest.raises(CodedError) as caught:
        ray.get(handle.fail.remote(503), timeout=30)
    error = caught.value
    assert isinstance(error, RayTaskError)
    assert (error.code, error.detail) == (503, {"retry": False})
    assert error.cause.code == 503


def test_handles_out_of_scope_end_the_actor_unless_named(session: None) -> None:
    """Ray ends an actor once every handle to it is gone (after its calls in flight), unless named or detached."""
    handle = ray.remote(Slow).remote()
    pid = ray.get(handle.pid.remote(), timeout=30)
    pending = handle.work.remote(0.5)
    del handle
    assert ray.get(pending, timeout=30) == 0.5  # the call in flight finished first
    _wait_gone(pid)
    named = ray.remote(Slow).options(name="kept-by-name").remote()
    named_pid = ray.get(named.pid.remote(), timeout=30)
    del named
    time.sleep(1.0)
    assert psutil.pid_exists(named_pid)
    assert "kept-by-name" in ray.util.list_named_actors()
    ray.kill(ray.get_actor("kept-by-name"))


def test_ray_terminate_ends_after_the_calls_before_it(session: None) -> None:
    handle = ray.remote(Slow).remote()
    pid = ray.get(handle.pid.remote(), timeout=30)
    work = handle.work.remote(0.3)
    ray.get(handle.__ray_terminate__.remote(), timeout=30)
    assert ray.get(work) == 0.3
    _wait_gone(pid)


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 15
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"actor process {pid} still runs"
        time.sleep(0.05)


def test_placement_group_tables_and_numpy_bundle_indices(session: None) -> None:
    """verl sorts its groups by ray._private.state.state.placement_group_table(pg.id) and indexes bundles with
    numpy integers; slime reads available_resources_per_node."""
    from ray._private.state import available_resources_per_node, state

    group = ray.util.placement_group([{"CPU": 1, "GPU": 1}] * 2, strategy="STRICT_PACK", name="tables")
    try:
        table = state.placement_group_table(group.id.hex())
        assert table["bundles"] == {0: {"CPU": 1, "GPU": 1}, 1: {"CPU": 1, "GPU": 1}}
        assert table["bundles_to_node_id"][0] == ray.nodes()[0]["NodeID"]
        assert ray.util.placement_group_table(group) == table
        assert next(iter(available_resources_per_node().values()))["GPU"] == 0
        strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=np.int64(1))
        handle = ray.remote(Slow).options(num_gpus=1, scheduling_strategy=strategy).remote()
        assert ray.get(handle.work.remote(0), timeout=30) == 0
        actor_id = handle._actor_id.hex()
        assert ray.experimental.state.api.get_actor(actor_id)["state"] == "ALIVE"
        with pytest.raises(ValueError, match=r"placement_group_bundle_index=2 is not in -1\.\.1"):
            ray.remote(Slow).options(scheduling_strategy=PlacementGroupSchedulingStrategy(group, 2)).remote()
    finally:
        ray.util.remove_placement_group(group)


def test_util_collective_from_the_driver_and_inside_the_actors(session: None) -> None:
    """ray.util.collective: a group made inside the actors (init_collective_group, as verl's checkpoint engine
    does) and one made from the driver (create_collective_group), over gloo."""
    cls = ray.remote(Reducer)
    members = [cls.remote() for _ in range(2)]
    assert ray.get([m.join.remote(2, r, "inside") for r, m in enumerate(members)], timeout=120) == [0, 1]
    assert ray.get([m.sum_of.remote(r + 1.0, "inside") for r, m in enumerate(members)], timeout=60) == [3.0, 3.0]
    ray.util.collective.create_collective_group(members, 2, [1, 0], backend="gloo", group_name="driver")
    assert ray.get([m.broadcast_from_zero.remote(r + 5.0, "driver") for r, m in enumerate(members)]) == [6.0, 6.0]
    assert ray.get([m.leave.remote("inside") for m in members]) == [False, False]


def test_a_placement_group_handed_to_an_actor_or_captured_by_it(session: None) -> None:
    """slime hands its group to the rollout manager, which starts engines in given bundles; Ray's
    placement_group_capture_child_tasks puts an actor's own actors in its group by default."""
    group = ray.util.placement_group([{"CPU": 1, "GPU": 1}] * 2, name="handed")
    try:
        placer = ray.remote(Placer).remote()
        assert ray.get(placer.start_in.remote(group, 1), timeout=60) == [1]  # bundle 1's GPU
        captured = (
            ray.remote(Placer)
            .options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, 0, placement_group_capture_child_tasks=True)
            )
            .remote()
        )
        group_id, gpus = ray.get(captured.start_captured.remote(), timeout=60)
        assert group_id == group.id and gpus in ([0], [1])
    finally:
        ray.util.remove_placement_group(group)
