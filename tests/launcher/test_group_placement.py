"""Placing a placement group's bundles over hosts (milliseconds): Ray's four strategies, all or nothing.

The strategies as Ray documents and tests them (python/ray/tests/test_placement_group.py at 56efc5ba:
test_placement_group_pack, _strict_pack, _spread, _strict_spread): PACK on as few hosts as possible, STRICT_PACK on
one or refused, SPREAD over distinct hosts as far as they fit, STRICT_SPREAD on distinct hosts or refused."""

from __future__ import annotations

import pytest

from launcher.cluster import Capacity, place_bundles
from runtime.placement import GroupSpec, PlacementRefused


def hosts(**cpus_gpus: tuple[int, int]) -> dict[str, Capacity]:
    return {name: Capacity.of({"CPU": cpus}, range(gpus)) for name, (cpus, gpus) in cpus_gpus.items()}


def placed(cluster: dict[str, Capacity], bundles: list[dict[str, float]], strategy: str) -> list[tuple[str, list[int]]]:
    spec = GroupSpec(bundles=bundles, strategy=strategy, name="pg")
    return [(host, list(claim.gpu_ids)) for host, claim in place_bundles(cluster, spec)]


def test_pack_puts_the_group_on_one_host_when_it_fits_else_fills_hosts_in_order() -> None:
    cluster = hosts(h1=(2, 0), h2=(4, 0), h3=(4, 0))
    assert placed(cluster, [{"CPU": 2}] * 2, "PACK") == [("h2", []), ("h2", [])]  # h1 cannot take both
    assert placed(cluster, [{"CPU": 2}] * 4, "PACK") == [("h1", []), ("h2", []), ("h2", []), ("h3", [])]
    assert placed(cluster, [{"CPU": 2}] * 2, "STRICT_PACK") == [("h2", []), ("h2", [])]
    with pytest.raises(PlacementRefused) as refused:
        placed(cluster, [{"CPU": 2}] * 3, "STRICT_PACK")
    assert str(refused.value) == (
        "placement group 'pg' (STRICT_PACK, 3 bundle(s)): needs {'CPU': 6.0} on one host; "
        "free/total: h1 CPU 2/2; h2 CPU 4/4; h3 CPU 4/4; nothing was reserved"
    )


def test_spread_uses_distinct_hosts_while_they_fit_then_reuses_the_least_used() -> None:
    cluster = hosts(h1=(4, 2), h2=(4, 2))
    assert placed(cluster, [{"GPU": 1}] * 3, "SPREAD") == [("h1", [0]), ("h2", [0]), ("h1", [1])]
    full_h1 = hosts(h1=(1, 0), h2=(4, 0))
    assert placed(full_h1, [{"CPU": 1}] * 3, "SPREAD") == [("h1", []), ("h2", []), ("h2", [])]
    assert placed(cluster, [{"GPU": 1}] * 2, "STRICT_SPREAD") == [("h1", [0]), ("h2", [0])]
    with pytest.raises(PlacementRefused, match=r"needs 3 distinct alive hosts, the launch has 2 \(h1, h2\)"):
        placed(cluster, [{"GPU": 1}] * 3, "STRICT_SPREAD")


def test_strict_spread_finds_the_assignment_a_greedy_pass_would_miss() -> None:
    cluster = hosts(h1=(1, 1), h2=(1, 0))  # bundle 0 fits both hosts, bundle 1 only h1
    assert placed(cluster, [{"CPU": 1}, {"GPU": 1}], "STRICT_SPREAD") == [("h2", []), ("h1", [0])]
    with pytest.raises(
        PlacementRefused,
        match=r"bundle 1 \{'GPU': 2.0\} fits on no host; free/total: h1 CPU 1/1, GPU 1/1; h2 CPU 1/1, GPU 0/0",
    ):
        placed(cluster, [{"CPU": 1}, {"GPU": 2}], "STRICT_SPREAD")


def test_a_refusal_names_the_bundle_and_reserves_nothing() -> None:
    cluster = hosts(h1=(2, 1), h2=(2, 1))
    before = {name: capacity.available() for name, capacity in cluster.items()}
    with pytest.raises(PlacementRefused) as refused:
        placed(cluster, [{"GPU": 1}, {"GPU": 1}, {"GPU": 1}], "PACK")
    assert str(refused.value) == (
        "placement group 'pg' (PACK, 3 bundle(s)): bundle 2 {'GPU': 1.0} fits on no host after bundles 0-1; "
        "free/total: h1 GPU 0/1; h2 GPU 0/1; nothing was reserved"
    )
    assert {name: capacity.available() for name, capacity in cluster.items()} == before


def test_fractional_bundles_share_gpus_and_spread_takes_the_emptiest() -> None:
    cluster = hosts(h1=(4, 2))
    assert placed(cluster, [{"GPU": 0.5}] * 3, "PACK") == [("h1", [0]), ("h1", [0]), ("h1", [1])]
    assert placed(cluster, [{"GPU": 0.5}] * 2, "SPREAD") == [("h1", [0]), ("h1", [1])]
