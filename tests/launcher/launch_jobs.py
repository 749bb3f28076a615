"""Job entrypoints used by the launcher tests (imported by ``miles-launch`` via PYTHONPATH)."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from typing import Any


def probe_http(ctx: Any) -> int:
    """GET / on every worker of every pool; print one JSON line with the results."""
    results = {}
    for pool_id in ctx.pool_ids:
        for address in ctx.addresses(pool_id):
            with urllib.request.urlopen(f"http://{address}/", timeout=5) as response:
                results[address] = response.status
    print("PROBE_RESULT " + json.dumps(results), flush=True)
    return 0 if all(code == 200 for code in results.values()) else 1


def wait_forever(ctx: Any) -> int:
    """Write the worker pids to $MILES_TEST_MARKER, then block (the test kills the launcher)."""
    marker = os.environ["MILES_TEST_MARKER"]
    info = {w.worker_id: {"pid": w.pid, "host": w.host} for w in ctx.workers()}
    with open(marker + ".tmp", "w") as fh:
        json.dump({"launcher_pid": os.getpid(), "workers": info}, fh)
    os.replace(marker + ".tmp", marker)
    while True:
        time.sleep(0.5)


def fail(ctx: Any) -> int:
    """A job that raises."""
    raise RuntimeError("job failed on purpose")


def exit_code(ctx: Any) -> int:
    """Return job.args['code']."""
    return int(ctx.args.get("code", 0))


def report_deaths(ctx: Any) -> int:
    """Wait until a death is reported (the test kills a worker), print it."""
    deadline = time.monotonic() + float(ctx.args.get("timeout_s", 20))
    marker = os.environ.get("MILES_TEST_MARKER")
    if marker:
        with open(marker, "w") as fh:
            json.dump({w.worker_id: w.pid for w in ctx.workers()}, fh)
    while time.monotonic() < deadline:
        if ctx.deaths:
            cell = ctx.cells(ctx.deaths[0].cell_id.rsplit("-", 1)[0])
            print("DEATH_SEEN " + json.dumps({"report": str(ctx.deaths[0]), "alive": [c.alive for c in cell]}))
            sys.stdout.flush()
            return 0
        time.sleep(0.1)
    return 1


def cross_calls(ctx: Any) -> int:
    """Actors on different hosts call each other (by handle and by name); print one JSON line."""
    handles = ctx.handles("c")
    wheres = [h.where().result(timeout=20) for h in handles]
    hosts = [w["MILES_HOST"] for w in wheres]
    on = {host: [h for h, w in zip(handles, wheres, strict=True) if w["MILES_HOST"] == host] for host in set(hosts)}
    first, second = sorted(on)
    by_handle = on[first][0].add_on_peer(on[second][0], 5).result(timeout=20)
    names = {w.worker_id: w.host for w in ctx.workers("c")}
    target = next(name for name, host in names.items() if host == first)
    by_name = on[second][0].add_on_named(target, 7).result(timeout=20)
    on[second][0].say("hello from the second host").result(timeout=20)  # its output reaches the console
    result = {
        "hosts": hosts,
        "by_handle": by_handle,
        "by_name": by_name,
        "endpoints": [w.endpoint for w in ctx.workers("c")],
        "routes": {  # where each caller's socket goes: a twin only within one host's network namespace
            "same_host": [on[first][1].endpoint, on[first][0].route_to(on[first][1]).result(timeout=20)],
            "cross_host": [on[second][0].endpoint, on[first][0].route_to(on[second][0]).result(timeout=20)],
            "from_launcher": [handles[0].endpoint, handles[0].connection.transport_address],
        },
    }
    print("CROSS " + json.dumps(result), flush=True)
    return 0


async def async_calls(ctx: Any) -> int:
    """An async entrypoint awaiting actor calls (the launcher runs it with asyncio.run)."""
    values = [await handle.add(1) for handle in ctx.handles("c")]
    print("ASYNC " + json.dumps(values), flush=True)
    return 0


def security(ctx: Any) -> int:
    """Report the launch's security and discovery as seen by the job; call an actor through a FROM_ENV handle."""
    import runtime

    (handle,) = ctx.handles("c")
    by_env = runtime.connect(handle.endpoint, deadline_s=10, server_key=handle.server_key)  # MILES_CURVE_DIR here
    with urllib.request.urlopen(ctx.metrics_sd_url, timeout=5) as response:
        targets = json.loads(response.read())
    report = {
        "curve": handle.process_health().result(timeout=10)["curve"],
        "env": os.environ.get("MILES_CURVE_DIR"),
        "ctx_curve_dir": ctx.curve_dir,
        "env_matches": os.environ.get("MILES_CURVE_DIR") == ctx.curve_dir,
        "by_env": by_env.add(1).result(timeout=10),
        "sd_workers": [group["labels"]["worker"] for group in targets],
    }
    print("SECURITY " + json.dumps(report), flush=True)
    return 0


def unknown_pool(ctx: Any) -> int:
    """Ask for a pool hosts.toml does not define; print what was raised."""
    try:
        ctx.handles("no-such-pool")
    except KeyError as exc:
        print(f"UNKNOWN_POOL {type(exc).__name__}: {exc}", flush=True)
        return 0
    return 1


def names_across(ctx: Any) -> int:
    """Named actors across the hosts of a launch (the launch's name service); prints one line ``NAMES {json}``.

    An actor on the first host spawns a named child; an actor on the last host finds and calls it, cannot take
    its name, gets it with get_if_exists; namespaces scope names; a name held by a killed actor is taken again.
    """
    from runtime import RemoteError, get_actor

    workers = ctx.workers("c")
    hosts = sorted({w.host for w in workers})
    a = next(w.handle for w in workers if w.host == hosts[0])
    b = next(w.handle for w in workers if w.host == hosts[-1])
    out: dict[str, Any] = {"hosts": hosts, "child": a.spawn_named("shared", "", False).result(60)}
    out["b_adds"] = b.add_on_named("shared", 5).result(30)
    try:
        b.spawn_named("shared", "", False).result(60)
    except ValueError as exc:
        out["taken"] = str(exc)
    out["if_exists"] = b.spawn_named("shared", "", True).result(60)
    out["blue"] = b.spawn_named("shared", "blue", False).result(60)
    out["a_blue"] = a.add_on_named("shared", 1, "blue").result(30)
    out["a_default"] = a.add_on_named("shared", 1).result(30)
    try:
        a.add_on_named("shared", 1, "green").result(30)
    except RemoteError as exc:
        out["green"] = f"{exc.remote_type}: {exc.remote_message}"
    out["launcher"] = get_actor("shared").add(0).result(10)  # the launcher's own registry, no round trip
    out["killed_pid"] = a.kill_child("shared", "").result(30)
    out["again"] = b.spawn_named("shared", "", False).result(60)
    out["a_after"] = a.add_on_named("shared", 0).result(30)
    print("NAMES " + json.dumps(out), flush=True)
    return 0


def print_then_hang(ctx: Any) -> int:
    """Print a line, write $MILES_TEST_MARKER, then hang (a job stuck on a dead peer)."""
    print("step 1 done", flush=True)
    with open(os.environ["MILES_TEST_MARKER"], "w") as fh:
        json.dump({"launcher_pid": os.getpid()}, fh)
    while True:
        time.sleep(0.5)


def leave_a_thread(ctx: Any) -> int:
    """Start a thread that never ends (not a daemon: a library's stuck worker), write $MILES_TEST_MARKER, hang."""
    import threading

    threading.Thread(target=threading.Event().wait, name="stuck-forever").start()
    with open(os.environ["MILES_TEST_MARKER"], "w") as fh:
        json.dump({"launcher_pid": os.getpid()}, fh)
    while True:
        time.sleep(0.5)


def place_across(ctx: Any) -> int:
    """Actors placed at run time across SSH hosts: h1's pool actor places one on h2; the job places one on h2 and
    kill -9s it (h1's actor, a holder, sees the death); then h2's agent is killed (the actor h1 placed there dies
    with it, and h2 leaves the cluster). One JSON line."""
    import signal

    from runtime import placement, spawn

    (counter,) = ctx.handles("c")
    placed = counter.place({"GPU": 1}, "h2").result(timeout=60)
    probe = spawn("launch_actors:Probe", resources={"GPU": 1}, host="h2")
    probe_where = probe.where().result(timeout=30)
    across = counter.call_probe(probe).result(timeout=30)
    held = {n.host: n.available for n in placement.nodes()}
    os.kill(probe_where["pid"], signal.SIGKILL)
    killed = counter.seconds_until_dead(probe).result(timeout=60)
    time.sleep(0.5)  # the exit reaches the ledger
    after_kill = {n.host: n.available for n in placement.nodes()}
    os.kill(ctx.provider.agents.link("h2").hello["pid"], signal.SIGKILL)
    lost = counter.seconds_until_dead().result(timeout=60)
    nodes = {n.host: [n.alive, n.lost_reason] for n in placement.nodes()}
    out = {
        "placed": placed, "probe": probe_where, "endpoint": probe.endpoint, "across": across, "held": held,
        "killed": killed, "after_kill": after_kill, "lost": lost, "nodes": nodes,
    }  # fmt: skip
    print("PLACED " + json.dumps(out), flush=True)
    return 0


def placed_then_cut(ctx: Any) -> int:
    """A SPREAD placement group over h1 and h2 with a placed actor in each bundle; once the test cuts h2's link
    (after $MILES_TEST_MARKER appears), what every holder sees: one JSON line."""
    from runtime import DeadlineExceeded, placement, spawn
    from runtime.placement import ResourceRequest

    group = placement.create_group([{"CPU": 1}, {"CPU": 1}], "SPREAD", name="spread")
    probes = [
        spawn(
            "launch_actors:Probe",
            placement=ResourceRequest(resources={"CPU": 1}, group_id=group.group_id, bundle_index=i),
        )
        for i in range(2)
    ]
    wheres = [probe.where().result(timeout=30)["host"] for probe in probes]
    total = {n.host: n.total for n in placement.nodes()}
    with open(os.environ["MILES_TEST_MARKER"], "w") as fh:
        json.dump({"hosts": wheres}, fh)
    deadline = time.monotonic() + 30
    errors: list[str | None] = [None, None]
    while time.monotonic() < deadline and (None in errors or placement.groups()[0].state == "CREATED"):
        for i, probe in enumerate(probes):
            if errors[i] is None:
                try:
                    probe.where().result(timeout=2)
                except DeadlineExceeded:
                    continue  # cut off, not yet declared lost: the call waits
                except Exception as exc:
                    errors[i] = f"{type(exc).__name__}: {exc}"
        time.sleep(0.2)
    time.sleep(1.0)  # the failed group's h1 bundle returns
    nodes = {n.host: {"alive": n.alive, "available": n.available} for n in placement.nodes()}
    view = next(g for g in placement.groups() if g.group_id == group.group_id)
    out = {"hosts": wheres, "errors": errors, "group": [view.state, view.reason], "nodes": nodes, "total": total}
    print("CUT " + json.dumps(out), flush=True)
    return 0
