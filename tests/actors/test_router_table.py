"""The controller's router by default: actors/inference/router_table.py's pool expander, as miles-launch runs it
(the entry point pyproject.toml registers, found by launcher/config/pool_expanders.py while hosts.toml is parsed).

With the provider API the controller gets a router pool on the built-in host "launcher"; ``router_pool = false``,
an explicit pool id, or no provider API (hosts.example.toml, the single-host demo) leave its pool as written, and
``router_pool = false`` really runs the router beside the controller (a child of the controller's process).
A controller pool of several cells is refused where its cells would share one router pool or one engine pool (the
controller adopts every cell of its engine pool: actors/inference/controller.py ``_adopt_pool``); with its own
engines (``num_engines``) and routers it may have several.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest
from inference_fixtures import FAST_ROUTER, _descendants, running_controller

from actors.inference import InferenceController, RouterSettings
from actors.inference.router_pool import PoolRouter
from actors.inference.router_table import expand_controller_pool, router_pool
from launcher.config.hosts_config import load_config, parse_config
from launcher.config.specs import PoolSpec
from launcher.errors import ConfigError
from launcher.launch.provider_service import ProviderClient
from tests.launcher import toml_text

REPO = Path(__file__).resolve().parents[2]
ROUTER = {"policy": "round_robin", "health_check_interval_s": 1, "start_timeout_s": 30}


def controller_pool(**kwargs: Any) -> dict[str, Any]:
    worker = {
        "kind": "serve",
        "actor_class": "actors.inference.controller:InferenceController",
        "plan_kwargs": ["provider_api"],
        "kwargs": {"server_id": "engines", "engine_pool": "engines", "router": ROUTER, **kwargs},
    }
    return {"id": "inference", "hosts": ["h1"], "worker": worker}


def without_api(pool: dict[str, Any]) -> dict[str, Any]:
    return {**pool, "worker": {**pool["worker"], "plan_kwargs": []}}


def forking_engines(pool: dict[str, Any]) -> dict[str, Any]:
    """The controller pool forking its own engines (``num_engines``) instead of serving a launcher engine pool."""
    kwargs = {k: v for k, v in pool["worker"]["kwargs"].items() if k != "engine_pool"}
    return {**pool, "worker": {**pool["worker"], "kwargs": {**kwargs, "num_engines": 1}}}


def config_text(pool: dict[str, Any]) -> str:
    data = {
        "hosts": [{"name": "h1", "address": "10.0.0.1", "workdir": "/w"}],
        "job": {"entrypoint": "actors.demo:main"},
        "pools": [pool],
    }
    return toml_text.dump(data)


def test_a_controller_with_the_provider_api_gets_a_router_pool_on_the_launcher_host() -> None:
    config = parse_config(config_text(controller_pool()))
    assert [p.id for p in config.pools] == ["inference", "inference-router"]
    assert config.pool("inference").worker.kwargs["router_pool"] == "inference-router"
    expected = router_pool("inference-router", RouterSettings(**ROUTER), hosts=["launcher"])
    assert config.pool("inference-router") == PoolSpec.model_validate(expected)
    command = config.pool("inference-router").worker.command  # the controller's router settings, rendered
    assert "--policy round_robin" in command and "--health-check-interval-secs 1" in command
    assert config.pool("inference-router").worker.ready.deadline_s == 30
    assert config.host("launcher").provider == "local"
    explicit = parse_config(config_text(controller_pool(router_pool=True)))
    assert explicit.pools == config.pools  # `router_pool = true` asks for the same default


def test_the_expander_leaves_the_table_it_was_given_untouched() -> None:
    pool = controller_pool()
    before = copy.deepcopy(pool)
    controller, _ = expand_controller_pool(pool)
    assert pool == before and controller["worker"]["kwargs"]["router_pool"] == "inference-router"


@pytest.mark.parametrize(
    "pool",
    [
        controller_pool(router_pool=False),
        controller_pool(router_pool="my-router"),
        without_api(controller_pool()),
        {**forking_engines(controller_pool(router_pool=False)), "cells": 2},
    ],
    ids=["router_pool-false", "explicit-pool", "no-provider-api", "cells-forking-own-engines-and-router"],
)
def test_false_an_explicit_pool_or_no_provider_api_keep_the_pool_as_written(pool: dict[str, Any]) -> None:
    assert expand_controller_pool(copy.deepcopy(pool)) == [pool]


def test_the_single_host_demo_keeps_its_router_beside_the_controller() -> None:
    """hosts.example.toml: no provider API, so no router pool (the host "launcher" has the dashboard's pools only)."""
    config = load_config(REPO / "hosts.example.toml")
    assert "router_pool" not in config.pool("inference").worker.kwargs
    assert not any("router" in p.id for p in config.pools)
    assert [p.id for p in config.pools] == ["trainer", "inference", "rollout", "dashboard", "dashboard-server"]


@pytest.mark.parametrize(
    ("pool", "wanted"),
    [
        (
            {**forking_engines(controller_pool()), "cells": 2},
            "cells = 2: each controller cell would adopt (and restart) the same router",
        ),
        ({**forking_engines(controller_pool(router_pool="r")), "cells": 3}, "cells = 3: each controller cell would"),
        (
            {**controller_pool(router_pool=False), "cells": 2},
            "cells = 2 with engine_pool = 'engines': a controller serves every cell of its engine pool, so each of "
            "the 2 controller cells would adopt (and restart) the same engines of pool 'engines'. Set cells = 1",
        ),
        (
            {**without_api(controller_pool(router_pool=False)), "cells": 4},
            "cells = 4 with engine_pool = 'engines'",
        ),
        (without_api(controller_pool(router_pool=True)), "router_pool = true places the router on the launcher's host"),
        (
            controller_pool(router={"polcy": "random"}),
            "kwargs.router (RouterSettings): polcy: Extra inputs are not permitted",
        ),
        (controller_pool(router_pool=3), "kwargs.router_pool must be a pool id, true or false, got 3"),
    ],
    ids=[
        "default-with-cells",
        "explicit-with-cells",
        "engine-pool-with-cells",
        "engine-pool-with-cells-without-api",
        "true-without-api",
        "bad-router",
        "bad-choice",
    ],
)
def test_choices_that_cannot_work_are_refused_naming_the_pool_and_the_expander(
    pool: dict[str, Any], wanted: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(config_text(pool))
    message = str(info.value)
    assert message.startswith("<hosts.toml>: pool 'inference': ") and wanted in message, message
    assert "actors.inference.router_table:expand_controller_pool" in message


def test_router_pool_true_is_refused_by_a_controller_spawned_without_the_launcher() -> None:
    with pytest.raises(ValueError, match="router_pool=True: give a router pool's id, or false"):
        InferenceController(server_id="s", num_engines=1, router_pool=True)


def test_a_controller_under_the_launcher_without_a_router_pool_says_the_expander_did_not_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = {"address": "tcp://127.0.0.1:1", "token": "t"}  # never called by the constructor
    with caplog.at_level(logging.WARNING, logger="actors.inference.controller"):
        InferenceController(server_id="s", num_engines=1, provider_api=api, router_pool=False)
        assert not caplog.records  # chosen: nothing to say
        InferenceController(server_id="s", num_engines=1, provider_api=api)
    (record,) = caplog.records
    assert "router_pool is not set" in record.getMessage() and "pip install -e ." in record.getMessage()


@pytest.mark.processes
def test_router_pool_false_runs_the_router_beside_the_controller(tmp_path: Path) -> None:
    with running_controller("beside", str(tmp_path), num_engines=1, router_pool=False, router=FAST_ROUTER) as handle:
        status = handle.status().result(30)
        assert status["router_alive"] and status["router_pid"] in _descendants(handle.pid)


@pytest.mark.parametrize(
    ("worker_address", "endpoint", "url"),
    [
        ("127.0.0.1", "tcp://10.1.2.3:7000", "http://10.1.2.3:31000"),  # on the launcher's machine: via its address
        ("127.0.0.1", "tcp://[fd00::7]:7000", "http://[fd00::7]:31000"),
        ("127.0.0.1", "tcp://127.0.0.1:7000", "http://127.0.0.1:31000"),  # the controller is there too
        ("10.9.9.9", "tcp://10.1.2.3:7000", "http://10.9.9.9:31000"),  # an SSH host's router: its own address
    ],
)
def test_a_router_on_a_local_host_is_reached_at_the_launchers_address(
    worker_address: str, endpoint: str, url: str
) -> None:
    """The provider API's cells view gives a local host's worker a loopback address
    (launcher/launch/cell_starter.py)."""
    worker = {"address": worker_address, "ports": {"port": 31000, "prometheus_port": 31001}}
    view = {"workers": [worker], "pid": 1, "cell_id": "r-0", "host": "launcher"}
    router = PoolRouter(view, ProviderClient({"endpoint": endpoint, "server_key": None}))
    assert router.url == url
