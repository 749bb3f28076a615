"""Job entrypoints of the Slurm tests (imported by ``miles-launch`` via PYTHONPATH)."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def _emit(tag: str, value: Any) -> None:
    print(f"{tag} {json.dumps(value)}", flush=True)


def placement_restart_lost(ctx: Any) -> int:
    """Report every worker's plan-given environment, restart a cell on node2 through the provider API, report the
    Prometheus targets, place an actor on node2 at run time, then (the test kills node2's host agent once
    $MILES_TEST_MARKER exists) wait for the lost host and report it."""
    where = {}
    for cell in ctx.cells("c"):
        for worker, handle in zip(cell.workers, cell.handles, strict=True):
            where[worker.worker_id] = {"host": worker.host, **handle.where().result()}
    _emit("WHERE", where)
    api = ctx.provider_api
    on_node2 = next(cell for cell in ctx.cells("c") if cell.workers[0].host == "node2")
    before = [w.pid for w in on_node2.workers]
    view = api.restart_cell(pool="c", index=on_node2.index).result()
    _emit("RESTART", {"before": before, "after": [w.pid for w in view.workers],
                      "hosts": [w.host for w in view.workers], "state": view.state})  # fmt: skip
    with open(str(ctx.metrics_sd_file)) as fh:
        _emit("TARGETS", sorted(t for group in json.load(fh) for t in group["targets"]))
    from runtime import spawn

    placed = spawn("launch_actors:Probe", resources={"CPU": 1}, host="node2")  # started by node2's agent (srun)
    _emit("PLACED", {**placed.where().result(timeout=30), "endpoint": placed.endpoint})
    marker = os.environ["MILES_TEST_MARKER"]
    with open(marker, "w") as fh:
        json.dump({"launcher_pid": os.getpid()}, fh)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lost = api.lost_hosts().result()
        if lost:
            deaths = [d.reason for d in api.deaths().result() if d.host == "node2"]
            node1 = [c.alive for c in ctx.cells("c") if c.workers[0].host == "node1"]
            try:
                placed.where().result(timeout=10)
                placed_end = "still answering"
            except Exception as exc:  # lost with node2's agent
                placed_end = f"{type(exc).__name__}: {exc}"
            _emit("LOST", {"lost_hosts": lost, "deaths": deaths, "node1_alive": node1, "placed": placed_end})
            return 0
        time.sleep(0.1)
    print("no lost host seen", file=sys.stderr)
    return 1
