"""What runtime.ray_compat cannot honour raises at once, naming the option and the alternative (nothing Ray
accepts is silently ignored); and actor fault tolerance (docs.ray.io ray-core/fault_tolerance/actors.html).

Ray sources read: python/ray/_private/ray_option_utils.py (the option sets), python/ray/runtime_env,
python/ray/_private/worker.py (init's parameters), python/ray/actor.py (max_restarts, max_task_retries).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import runtime.ray_compat as ray
from runtime.ray_compat.util.scheduling_strategies import NodeAffinitySchedulingStrategy

pytestmark = pytest.mark.usefixtures("ray_session_2cpu")


class Plain:
    def __init__(self, a, b=2):
        self.total = a + b

    def total_of(self):
        return self.total


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"memory": 1 << 30}, "memory= is not supported.*size the machine"),
        ({"accelerator_type": "A100"}, "accelerator_type= is not supported"),
        ({"placement_group": object()}, "PlacementGroupSchedulingStrategy"),
        ({"max_pending_calls": 10}, "StoreLimits"),
    ],
)
def test_refused_actor_options_name_the_alternative(options: dict, refusal: str) -> None:
    with pytest.raises(NotImplementedError, match=refusal):
        ray.remote(**options)(Plain)
    with pytest.raises(NotImplementedError, match=refusal):
        ray.remote(Plain).options(**options)


def test_unknown_options_and_runtime_env_fields() -> None:
    with pytest.raises(ValueError, match="invalid option 'num_cpu'"):
        ray.remote(num_cpu=1)(Plain)
    actor = ray.remote(Plain)
    with pytest.raises(NotImplementedError, match=r"runtime_env\['pip'\] is not supported.*virtualenv"):
        actor.options(runtime_env={"pip": ["torch"]}).remote(1)
    with pytest.raises(ValueError, match="unknown runtime_env field 'envvars'"):
        actor.options(runtime_env={"envvars": {}}).remote(1)
    with pytest.raises(NotImplementedError, match="only a local directory"):
        actor.options(runtime_env={"working_dir": "s3://bucket/code.zip"}).remote(1)
    with pytest.raises(NotImplementedError, match=r"use handle\.m\.options\(window=N\)"):
        ray.remote(_generator_backpressure_num_objects=4)(lambda: None)


def test_refused_apis() -> None:
    with pytest.raises(NotImplementedError, match=r"no Ray cluster to connect to.*miles-launch"):
        ray.init(address="ray://head:10001")
    with pytest.raises(NotImplementedError, match="there is no dashboard"):
        ray.init(include_dashboard=True, ignore_reinit_error=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_cpu'"):
        ray.init(num_cpu=2, ignore_reinit_error=True)
    with pytest.raises(RuntimeError, match=r"ray\.init twice"):
        ray.init()
    ref = ray.put(1)
    with pytest.raises(ValueError, match=r"only supported for actors\. For tasks, try ray\.cancel"):
        ray.kill(ref)
    with pytest.raises(TypeError, match=r"Calling 'put' on an ray\.ObjectRef"):
        ray.put(ref)
    with pytest.raises(AttributeError, match=r"ray\.data is not provided by runtime\.ray_compat.*available: "):
        ray.data  # noqa: B018
    with pytest.raises(AttributeError, match=r"ray\.util\.ActorPool is not provided"):
        ray.util.ActorPool  # noqa: B018
    with pytest.raises(NotImplementedError, match=r"lifetime='detached'.*ends with it; omit lifetime"):
        ray.util.placement_group([{"CPU": 1}], lifetime="detached")


def test_refused_task_and_call_shapes() -> None:
    @ray.remote
    def f(x):
        return x

    with pytest.raises(TypeError, match=r"Instead of running 'f\(\)', try 'f\.remote\(\)'"):
        f(1)
    with pytest.raises(NotImplementedError, match=r"task workers hold no GPUs.*actor with num_gpus"):
        f.options(num_gpus=1).remote(1)
    with pytest.raises(NotImplementedError, match="num_returns='dynamic' is deprecated"):
        f.options(num_returns="dynamic").remote(1)
    with pytest.raises(NotImplementedError, match="Ray DAGs"):
        f.bind(1)
    with pytest.raises(ValueError, match="asks for CPU=8; the cluster"):
        f.options(num_cpus=8).remote(1)
    actor = ray.remote(Plain)
    with pytest.raises(TypeError, match=r"Instead of 'Plain\(\)', use 'Plain\.remote\(\)'"):
        actor(1)
    with pytest.raises(TypeError, match="missing a required argument: 'a'"):
        actor.remote()
    with pytest.raises(ValueError, match=r"names another node.*soft=True"):
        actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy("elsewhere", soft=False)).remote(1)


class Star:
    def __init__(self, first, /, *args, scale=1, **extra):
        self.got = [first, list(args), scale, extra]

    def seen(self):
        return self.got


@pytest.mark.processes
def test_constructors_with_star_args_and_positional_only_parameters_run_as_in_ray() -> None:
    """Ray passes a constructor's arguments as given: ``*args``, positional-only parameters and ``**kwargs``
    (verl's workers take ``*args, **kwargs``); they were refused before issue 41."""
    actor = ray.remote(Star).remote(1, 2, 3, scale=4, tag="x")
    assert ray.get(actor.seen.remote(), timeout=30) == [1, [2, 3], 4, {"tag": "x"}]
    with pytest.raises(TypeError, match="missing a required argument: 'first'"):
        ray.remote(Star).remote()


@pytest.mark.processes
def test_positional_constructor_arguments_travel_by_name() -> None:
    actor = ray.remote(Plain).options(runtime_env={"env_vars": {"RC_TEST": "x"}}).remote(1, b=5)
    assert ray.get(actor.total_of.remote(), timeout=10) == 6
    with pytest.raises(AttributeError, match="'ActorHandle' object has no attribute 'totl'"):
        actor.totl.remote()


@ray.remote(max_restarts=4, max_task_retries=-1)
class Flaky:
    def __init__(self):
        self.counter = 0

    def increment_and_possibly_fail(self):
        if self.counter == 3:
            os._exit(1)
        self.counter += 1
        return self.counter


@pytest.mark.processes
def test_actor_fault_tolerance_page() -> None:
    """ray-core/fault_tolerance/actors.html: "Actor retries" (max_restarts, max_task_retries=-1): the call that
    crashed the actor runs again on the restarted one, whose state starts over."""
    actor = Flaky.remote()
    counts = [ray.get(actor.increment_and_possibly_fail.remote(), timeout=30) for _ in range(5)]
    assert counts == [1, 2, 3, 1, 2]


@pytest.mark.processes
def test_readme_ported_script_runs() -> None:
    """README "Coming from Ray": the ported script (examples/ray_compat_port.py) runs unchanged, in a process
    of its own (its own ray.init / shutdown)."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(root / "examples" / "ray_compat_port.py")],
        cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ray_compat port: ok" in done.stdout


def test_nodes_lists_the_launch_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """ray.nodes(): this machine with its resources, then the hosts of the launch (MILES_LAUNCH_POOLS, set by
    miles-launch for a command job)."""
    pools = {"trainer": ["10.0.0.2:7000", "10.0.0.2:7001"], "engines": ["10.0.0.3:7100"]}
    monkeypatch.setenv("MILES_LAUNCH_POOLS", json.dumps(pools))
    nodes = ray.nodes()
    assert nodes[0]["local"] and nodes[0]["Resources"]["CPU"] == 2
    assert [n["NodeManagerAddress"] for n in nodes[1:]] == ["10.0.0.2", "10.0.0.3"]
    assert all(n["Alive"] for n in nodes)
