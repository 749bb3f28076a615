"""The provider API's typed surface, without a launcher: its views cross the codec as themselves (frozen, checked
field by field where they arrive), a handle refuses a bad argument before anything reaches the wire, each call
carries its deadline, and an address that is not one is refused naming what it should be. The served API itself
is tested in test_provider_service.py (a real WorkerProvider)."""

from __future__ import annotations

import asyncio
import time

import pydantic
import pytest

from launcher.launch import provider_service
from launcher.launch.cells import DeathReport
from launcher.launch.provider_service import (
    CALL_DEADLINE_S,
    DEFAULT_START_WAIT_S,
    PROVIDER_API_ENV,
    ProviderApiError,
)
from launcher.launch.provider_views import CellView, WorkerView
from runtime.core.errors import CallRejected
from runtime.names.name_service import HandleState
from transport.codec import decode, encode
from transport.codec_types import DecodeError

WORKER = WorkerView(
    worker_id="w-1-0", kind="command", host="n0", address="127.0.0.1", ports={"port": 8000}, pid=41, state="ready",
    gpu_ids=[0, 1], error=None, log_path="/tmp/w-1-0.log", host_lost=False,
)  # fmt: skip
CELL = CellView(
    pool="w", index=1, cell_id="w-1", state="alive", host="n0", hosts=["n0"], address="127.0.0.1",
    ports={"port": 8000}, pid=41, restarts=2, death_reason=None, workers=[WORKER], lost_hosts=[],
)  # fmt: skip
UNSERVED = {"endpoint": "tcp://127.0.0.1:9", "server_key": None}


def _round_trip(value: object) -> object:
    body, buffers = encode(value)
    return decode(body, buffers)


def test_the_views_cross_the_codec_as_themselves() -> None:
    death = DeathReport(cell_id="w-1", worker_id="w-1-0", host="n0", pid=41, returncode=-9, reason="SIGKILL", at=1.5)
    state = HandleState(
        endpoint="tcp://h:1", name="x", class_path="m:C", boot_id=None, host="h", pid=1, machine_id="",
        metrics_port=None, server_key=None,
    )  # fmt: skip
    for value in (CELL, death, state, [CELL, CELL]):
        assert _round_trip(value) == value
    back = _round_trip(CELL)
    assert isinstance(back, CellView) and isinstance(back.workers[0], WorkerView)
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        back.state = "dead"  # type: ignore[misc]


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # sending what model_construct let through
def test_a_view_that_is_not_one_is_refused_where_it_arrives() -> None:
    for bad in (
        CELL.model_construct(**{**dict(CELL), "state": "exploded"}),  # not alive/starting/dead/stopped
        CELL.model_construct(**{**dict(CELL), "pid": "41; rm -rf /"}),
    ):
        body, buffers = encode(bad)
        with pytest.raises(DecodeError, match=r"cannot rebuild an object of type .*CellView"):
            decode(body, buffers)
    with pytest.raises(pydantic.ValidationError, match="Extra inputs are not permitted"):
        CellView(**CELL.model_dump(), secret="x")
    report = {"cell_id": "w-1", "worker_id": "w-1-0", "host": "n0", "pid": 41, "returncode": None, "reason": "x"}
    with pytest.raises(pydantic.ValidationError, match="pid"):
        DeathReport(**{**report, "pid": "41; rm -rf /"})  # a DeathReport is rebuilt with its checks where it arrives
    assert DeathReport(**report).pid == 41


def test_a_bad_argument_is_refused_before_the_wire() -> None:
    api = provider_service.connect(UNSERVED)  # nobody serves there: a call that left would fail otherwise
    with pytest.raises(CallRejected, match=r"argument 'index' of provider-api\.restart_cell expects .*int"):
        api.restart_cell(pool="w", index="1")
    with pytest.raises(CallRejected, match=r"argument 'pool' of provider-api\.cells .*at least 1 character"):
        api.cells("")
    with pytest.raises(CallRejected, match=r"provider-api\.stop_cells.*unexpected keyword argument 'grace'"):
        api.stop_cells(pool="w", grace=1)
    with pytest.raises(CallRejected, match=r"has no public method 'restart_cells'; methods: cells, deaths"):
        api.restart_cells(pool="w")


def test_each_call_carries_its_deadline() -> None:
    api = provider_service.connect(UNSERVED, deadline_s=7)
    assert api.policy is not None
    assert api.policy.deadline_s("cells", {}) == 7
    assert api.policy.deadline_s("restart_cell", {"deadline_s": 20}) == 27  # the cell's start on top
    assert api.policy.deadline_s("start_cells", {}) == 7 + DEFAULT_START_WAIT_S
    assert provider_service.connect(UNSERVED).policy.deadline_s("pools", {}) == CALL_DEADLINE_S  # type: ignore[union-attr]


def test_a_call_that_does_not_get_through_raises_the_services_error_within_its_deadline() -> None:
    """Awaited (an actor's event loop) as well as blocking (a job): ProviderApiError naming the endpoint, not the
    runtime's DeadlineExceeded or ActorDied."""
    api = provider_service.connect(UNSERVED, deadline_s=0.5)
    started = time.monotonic()
    with pytest.raises(ProviderApiError, match=r"provider API at tcp://127.0.0.1:9 did not answer cells: is the"):
        asyncio.run(_awaited(api.cells("w")))
    with pytest.raises(ProviderApiError, match="did not answer lost_hosts"):
        api.lost_hosts().result()
    assert time.monotonic() - started < 5


async def _awaited(call: object) -> object:
    return await call  # type: ignore[misc]


def test_an_address_that_is_not_one_names_what_it_should_be(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"provider API address .*expected .*plan_kwargs = \['provider_api'\]"):
        provider_service.connect({"endpoint": "http://x"})
    monkeypatch.setenv(PROVIDER_API_ENV, "nonsense")
    with pytest.raises(ValueError, match="MILES_PROVIDER_API='nonsense' is not a provider API address"):
        provider_service.from_env()
    monkeypatch.delenv(PROVIDER_API_ENV)
    assert provider_service.from_env() is None
