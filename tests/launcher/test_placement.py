"""Placement: PACK/SPREAD gangs, fractional sharing, colocation, all-or-nothing errors, ranks."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.config.hosts_config import HostConfig
from launcher.config.placement import Inventory, plan_placement
from launcher.config.specs import PoolSpec
from launcher.errors import PlacementError


def hosts(*gpus: int | tuple[int, ...]) -> list[HostConfig]:
    return [HostConfig(name=f"h{i}", address=f"10.0.0.{i}", gpus=g, workdir="/tmp") for i, g in enumerate(gpus)]


def pool(pid: str, gpus: float, cells: int = 1, per_cell: int = 1, strategy: str = "PACK", **kw: Any) -> PoolSpec:
    return PoolSpec(
        id=pid,
        cells=cells,
        workers_per_cell=per_cell,
        strategy=strategy,
        worker={"kind": "serve", "actor_class": "m:C", "gpus": gpus},
        **kw,
    )


def layout(plan: Any) -> list[tuple[str, str, tuple[int, ...]]]:
    return [(w.worker_id, w.host, w.gpu_ids) for w in plan.workers()]


def test_inventory_order_is_host_then_gpu() -> None:
    inv = Inventory.from_hosts(hosts((3, 1), 2))
    assert inv.slots() == [("h0", 1), ("h0", 3), ("h1", 0), ("h1", 1)]


def test_pack_keeps_a_cell_on_one_host() -> None:
    plan = plan_placement(hosts(2, 4), [pool("a", 1, per_cell=4)])
    assert layout(plan) == [(f"a-0-{i}", "h1", (i,)) for i in range(4)]  # h0 is too small for the gang
    assert [w.local_rank for w in plan.workers()] == [0, 1, 2, 3]


def test_pack_fills_hosts_in_order_when_no_single_host_fits() -> None:
    plan = plan_placement(hosts(2, 2), [pool("a", 1, per_cell=3)])
    assert layout(plan) == [("a-0-0", "h0", (0,)), ("a-0-1", "h0", (1,)), ("a-0-2", "h1", (0,))]
    assert [w.local_rank for w in plan.workers()] == [0, 1, 0]
    assert all(w.world_size == 3 for w in plan.workers())


def test_spread_round_robins_across_hosts_and_cells() -> None:
    plan = plan_placement(hosts(2, 2), [pool("a", 1, cells=2, per_cell=2, strategy="SPREAD")])
    assert layout(plan) == [("a-0-0", "h0", (0,)), ("a-0-1", "h1", (0,)), ("a-1-0", "h0", (1,)), ("a-1-1", "h1", (1,))]


def test_multi_gpu_bundles() -> None:
    plan = plan_placement(hosts(4, 4), [pool("tp", 2, cells=4)])
    assert layout(plan) == [
        ("tp-0-0", "h0", (0, 1)),
        ("tp-1-0", "h0", (2, 3)),
        ("tp-2-0", "h1", (0, 1)),
        ("tp-3-0", "h1", (2, 3)),
    ]


def test_fractional_workers_share_a_gpu() -> None:
    plan = plan_placement(hosts(1), [pool("small", 0.25, cells=4)])
    assert {w.gpu_ids for w in plan.workers()} == {(0,)}
    assert all(w.gpu_share == 0.25 for w in plan.workers())
    with pytest.raises(PlacementError):
        plan_placement(hosts(1), [pool("small", 0.25, cells=5)])


def test_colocation_puts_workers_on_the_same_gpus() -> None:
    plan = plan_placement(
        hosts(2, 2),
        [
            pool("actor", 0.5, cells=1, per_cell=4, strategy="SPREAD"),
            pool("rollout", 0.5, cells=1, per_cell=4, colocate_with="actor"),
        ],
    )
    actor, rollout = plan.cells("actor")[0], plan.cells("rollout")[0]
    assert [(w.host, w.gpu_ids) for w in actor.workers] == [(w.host, w.gpu_ids) for w in rollout.workers]


def test_colocation_over_capacity_fails() -> None:
    with pytest.raises(PlacementError, match=r"needs 0\.6 to colocate with 'actor-0-0'"):
        plan_placement(hosts(1), [pool("actor", 0.5), pool("rollout", 0.6, colocate_with="actor")])


def test_colocation_needs_matching_shapes() -> None:
    with pytest.raises(
        PlacementError, match=r"needs as many workers \(cells x workers_per_cell: 1 x 1\) as it has \(2\)"
    ):
        plan_placement(hosts(2), [pool("actor", 0.5, cells=2), pool("rollout", 0.5, colocate_with="actor")])


def test_all_or_nothing_error_names_pool_cell_and_free_capacity() -> None:
    with pytest.raises(PlacementError) as info:
        plan_placement(hosts(2, 2), [pool("train", 1, per_cell=2), pool("roll", 1, cells=3)])
    message = str(info.value)
    assert "pool 'roll' cell 'roll-2'" in message
    assert "h0: 0 free of 2 GPU(s); h1: 0 free of 2 GPU(s)" in message
    assert "Nothing was started" in message


def test_cpu_workers_pack_on_first_host_and_spread_round_robin() -> None:
    packed = plan_placement(hosts(0, 0), [pool("cpu", 0, cells=3)])
    assert {w.host for w in packed.workers()} == {"h0"}
    spread = plan_placement(hosts(0, 0), [pool("cpu", 0, cells=4, strategy="SPREAD")])
    assert [w.host for w in spread.workers()] == ["h0", "h1", "h0", "h1"]
    assert all(w.gpu_ids == () and w.gpu_share == 0 for w in spread.workers())


def test_pool_host_restriction() -> None:
    plan = plan_placement(hosts(2, 2), [pool("a", 1, cells=2, hosts=("h1",))])
    assert {w.host for w in plan.workers()} == {"h1"}
    with pytest.raises(PlacementError, match="unknown hosts"):
        plan_placement(hosts(2), [pool("a", 1, hosts=("nope",))])


def test_describe_lists_every_worker() -> None:
    text = plan_placement(hosts(2), [pool("a", 1, cells=2)]).describe()
    assert "a-0-0" in text and "a-1-0" in text and "h0" in text


def test_spread_fractions_use_the_emptiest_gpu() -> None:
    plan = plan_placement(hosts(2), [pool("a", 0.5, cells=2, strategy="SPREAD")])
    assert [w.gpu_ids for w in plan.workers()] == [(0,), (1,)]
    packed = plan_placement(hosts(2), [pool("a", 0.5, cells=2)])
    assert [w.gpu_ids for w in packed.workers()] == [(0,), (0,)]


def test_colocation_pairs_workers_of_other_shapes_in_order() -> None:
    """8 one-worker engine cells beside a trainer cell of 8 ranks: engine cell k shares trainer rank k's GPU."""
    plan = plan_placement(
        hosts(8),
        [pool("trainer", 0.5, per_cell=8, strategy="SPREAD"), pool("engines", 0.5, cells=8, colocate_with="trainer")],
    )
    trainer = [(w.host, w.gpu_ids) for w in plan.cells("trainer")[0].workers]
    assert [(c.workers[0].host, c.workers[0].gpu_ids) for c in plan.cells("engines")] == trainer
    assert [gpus for _, gpus in trainer] == [(g,) for g in range(8)]  # SPREAD: a fraction goes to the emptiest GPU
    assert [w.gpu_share for w in plan.workers()] == [0.5] * 16


def test_min_gpu_id_keeps_lower_gpus_free() -> None:
    """SGLang's base_gpu_id as a pool's min_gpu_id (actors/inference/engine_pool.py)."""
    plan = plan_placement(hosts(8), [pool("engines", 2, cells=2, min_gpu_id=4)])
    assert [c.workers[0].gpu_ids for c in plan.cells("engines")] == [(4, 5), (6, 7)]
