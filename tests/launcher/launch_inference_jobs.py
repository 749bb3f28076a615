"""Job entrypoints of the cluster inference tests (launcher-placed engines behind the controller's router)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import requests

BODY = {"text": "The answer is", "sampling_params": {"temperature": 0, "max_new_tokens": 4, "ignore_eos": True}}


class Traffic:
    """Requests through the router, one after another on a thread, each recorded as (the time it was sent, status or
    error). ``router_url``: the URL, or a function asked before each request (a restarted router has a new one)."""

    def __init__(self, router_url: str | Callable[[], str], timeout_s: float = 30.0) -> None:
        self.router_url = router_url if callable(router_url) else (lambda: router_url)
        self.timeout_s = timeout_s
        self.log: list[tuple[float, int | str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="traffic", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            try:
                url = self.router_url() + "/generate"
                status: int | str = requests.post(url, json=BODY, timeout=self.timeout_s).status_code
            except Exception as exc:  # no answer, or the controller did not name a router
                status = type(exc).__name__
                time.sleep(0.1)
            self.log.append((sent, status))

    def ok_since(self, since: float) -> int:
        return sum(1 for at, status in list(self.log) if at >= since and status == 200)

    def failed_between(self, since: float, until: float = float("inf")) -> list[int]:
        """Statuses of the requests sent in [since, until) that did not succeed."""
        return [status for at, status in list(self.log) if since <= at < until and status != 200]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def pool_cells(api: Any, pool: str) -> list[dict[str, Any]]:
    """The pool's cells from the provider API (a handle), as the dicts a report carries."""
    return [cell.model_dump() for cell in api.cells(pool).result()]


def wait(what: str, probe: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := probe()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout_s} s")
        time.sleep(0.1)
    return found


def engine_failover(ctx: Any) -> int:
    """kill -9 the engine on h2 while requests flow through the router; print what the launcher and the controller
    saw before and after (``FAILOVER {json}``)."""
    (controller,) = ctx.handles("inference")
    controller.start().result(timeout=240)
    router = controller.router_url().result(timeout=10)
    api = ctx.provider_api
    before = pool_cells(api, "engines")
    victim = next(cell for cell in before if cell["host"] == "h2")
    traffic = Traffic(router)
    try:
        started = time.monotonic()
        wait("requests served before the kill", lambda: traffic.ok_since(started) >= 3, 60)
        os.kill(victim["pid"], signal.SIGKILL)
        killed = time.monotonic()

        def replaced() -> dict[str, Any] | None:
            cell = controller.cells().result(timeout=10)[victim["index"]]
            return cell if cell["state"] == "serving" and cell["pid"] != victim["pid"] else None

        cell = wait("the engine replaced", replaced, 120)
        back = time.monotonic()
        wait("requests served after the replacement", lambda: traffic.ok_since(back) >= 3, 60)
    finally:
        traffic.stop()
    workers = requests.get(router + "/workers", timeout=10).json()["workers"]
    report = {
        "before": before,
        "victim": victim,
        "after": pool_cells(api, "engines"),
        "controller_cell": cell,
        "router_workers": sorted(w["url"] for w in workers),
        "ok_during": traffic.ok_since(killed) - traffic.ok_since(back),
        "failed_during": traffic.failed_between(killed, back),
        "failed_after": traffic.failed_between(back),
        "deaths": [dataclasses.asdict(d) for d in api.deaths(since=0).result()],
    }
    print("FAILOVER " + json.dumps(report), flush=True)
    controller.shutdown().result(timeout=60)
    return 0


def engine_state(url: str) -> dict[str, Any]:
    """What an engine says of itself: released memory and weight version (/get_server_info), /ready's status."""
    info = requests.get(url + "/get_server_info", timeout=10).json()["internal_states"][0]
    ready = requests.get(url + "/ready", timeout=10).status_code
    return {"url": url, "released": info["released_memory"], "version": info["weight_version"], "ready": ready}


class Watched:
    """A TrainerGroup or rollout handle whose calls first record every engine's own state (``log``)."""

    def __init__(self, inner: Any, label: str, urls: Any, log: list[dict[str, Any]]) -> None:
        self._inner, self._label, self._urls, self._log = inner, label, urls, log

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in ("train_on_shards", "push_weights", "generate"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._log.append({"call": f"{self._label}.{name}", "engines": [engine_state(u) for u in self._urls()]})
            if name == "push_weights":
                self._log[-1]["version"] = args[1]
            return attr(*args, **kwargs)

        return call


def colocated_demo(ctx: Any) -> int:
    """actors.demo's loop with ``colocate = true`` (from job.args), its trainer and rollout watched: before each
    train step, weight push and rollout every engine's own state is recorded; prints ``COLOCATED {json}``."""
    from actors.demo.loop import DemoSettings, finish, run_loop
    from actors.trainer.group import TrainerGroup

    settings = DemoSettings(**ctx.args)
    (controller,) = ctx.handles("inference")
    controller.start().result(timeout=300)
    urls = sorted(controller.engine_urls().result(timeout=30))
    log: list[dict[str, Any]] = []
    trainer = Watched(TrainerGroup.from_handles(ctx.handles("trainer")), "trainer", lambda: urls, log)
    (rollout,) = ctx.handles("rollout")
    versions: list[list[str]] = []

    class Rollout:
        def generate(self, *args: Any, **kwargs: Any) -> Any:
            log.append({"call": "rollout.generate", "engines": [engine_state(u) for u in urls]})
            future = rollout.generate(*args, **kwargs)

            class Recorded:
                def result(self, timeout: float) -> Any:
                    reply = future.result(timeout=timeout)
                    versions.append(reply["stats"]["weight_versions"])
                    return reply

            return Recorded()

    try:
        board = run_loop(settings, trainer, controller, Rollout())  # type: ignore[arg-type]
        refused = ""
        controller.release_memory().result(timeout=60)
        try:
            controller.router_url().result(timeout=10)
        except Exception as exc:  # the controller refuses generation while released
            refused = str(exc)
        controller.resume_memory().result(timeout=60)
    finally:
        controller.shutdown().result(timeout=60)
    print("COLOCATED " + json.dumps({"log": log, "versions": versions, "refused": refused}), flush=True)
    return finish(board, settings)


def in_my_netns(pid: int) -> bool:
    """Whether process ``pid`` shares this process's network namespace (runs on the launcher's "machine")."""
    return os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")


def router_failover(ctx: Any) -> int:
    """kill -9 the launcher-placed router (pool ``args.router_pool``) while requests flow through it (the traffic asks
    the controller for the router's URL before each request); print what was seen before and after (``ROUTER {json}``),
    and whether each router ran in the launcher's own network namespace."""
    pool = ctx.args.get("router_pool", "router")
    (controller,) = ctx.handles("inference")
    controller.start().result(timeout=240)
    api = ctx.provider_api
    (before,) = pool_cells(api, pool)
    first = controller.status().result(timeout=10)
    beside_launcher = [in_my_netns(before["pid"])]
    traffic = Traffic(lambda: controller.router_url().result(timeout=10), timeout_s=20)
    try:
        started = time.monotonic()
        wait("requests served before the kill", lambda: traffic.ok_since(started) >= 3, 60)
        os.kill(before["pid"], signal.SIGKILL)

        def restarted() -> dict[str, Any] | None:
            status = controller.status().result(timeout=10)
            serving = [c for c in status["cells"] if c["state"] == "serving"]
            done = status["router_restarts"] == 1 and status["router_alive"]
            return status if done and len(serving) == 2 and all(c["router_worker_id"] for c in serving) else None

        status = wait("the router restarted with both engines", restarted, 120)
        back = time.monotonic()
        wait("requests served through the new router", lambda: traffic.ok_since(back) >= 3, 60)
    finally:
        traffic.stop()
    workers = requests.get(status["router_url"] + "/workers", timeout=10).json()["workers"]
    (after,) = pool_cells(api, pool)
    beside_launcher.append(in_my_netns(after["pid"]))
    report = {
        "before": before,
        "after": after,
        "beside_launcher": beside_launcher,
        "engines": pool_cells(api, "engines"),
        "first_url": first["router_url"],
        "status": status,
        "router_workers": sorted(w["url"] for w in workers),
        "ok_after": traffic.ok_since(back),
        "failed_after": traffic.failed_between(back),
        "deaths": [dataclasses.asdict(d) for d in api.deaths(since=0).result()],
    }
    print("ROUTER " + json.dumps(report), flush=True)
    controller.shutdown().result(timeout=60)
    return 0


def lost_host(ctx: Any) -> int:
    """Cut host h2 off (its namespace's link down, ``ctx.args["cut_ns"]``) while requests flow through the router
    on h1; print what the controller and the launcher saw (``LOST {json}``). The link is brought back at the end."""
    cut_ns = ctx.args["cut_ns"]
    (controller,) = ctx.handles("inference")
    controller.start().result(timeout=240)
    router = controller.router_url().result(timeout=10)
    api = ctx.provider_api
    before = pool_cells(api, "engines")
    traffic = Traffic(router, timeout_s=10)
    try:
        started = time.monotonic()
        wait("requests served before the cut", lambda: traffic.ok_since(started) >= 3, 60)
        subprocess.run(["ip", "-n", cut_ns, "link", "set", "eth0", "down"], check=True)
        cut = time.monotonic()

        def dropped() -> list[dict[str, Any]] | None:
            cells = controller.cells().result(timeout=10)
            return cells if any(c["state"] == "disposed" for c in cells) else None

        cells = wait("h2's engine dropped by the controller", dropped, 120)
        dropped_at = time.monotonic()
        wait("requests served by h1's engine", lambda: traffic.ok_since(dropped_at) >= 5, 60)
        workers = requests.get(router + "/workers", timeout=10).json()["workers"]
    finally:
        traffic.stop()
        subprocess.run(["ip", "-n", cut_ns, "link", "set", "eth0", "up"], check=False)
    report = {
        "before": before,
        "cells": cells,
        "lost_hosts": api.lost_hosts().result(),
        "after": pool_cells(api, "engines"),
        "router_workers": sorted(w["url"] for w in workers),
        "cut_to_dropped_s": dropped_at - cut,
        "ok_after": traffic.ok_since(dropped_at),
        "failed_after": traffic.failed_between(dropped_at),
        "deaths": [dataclasses.asdict(d) for d in api.deaths(since=0).result()],
    }
    print("LOST " + json.dumps(report), flush=True)
    controller.shutdown().result(timeout=60)
    return 0


def refs_demo(ctx: Any) -> int:
    """actors.demo's loop with ``weight_sync = "refs"`` over a pool of engine actors; then the engine on h2 is
    SIGKILLed, the launcher restarts it and one more update goes over a group formed again. After the loop and
    after that update every engine must hold exactly the trainer's weights (its HF checkpoint, loaded as the engine
    loads one). ``check_model`` (job.args): the engines' model config. Prints ``REFS {json}``."""
    import tempfile

    import torch

    from actors.cpu_engine import build_model_from_named_tensors, read_weights_dir
    from actors.demo.loop import DemoSettings, WeightSync, finish, run_loop
    from actors.model_config import ModelConfig
    from actors.trainer.group import TrainerGroup

    args = dict(ctx.args)
    model = ModelConfig(**args.pop("check_model"))
    settings = DemoSettings(**args)
    (controller,) = ctx.handles("inference")
    trainer = TrainerGroup.from_handles(ctx.handles("trainer"))
    (rollout,) = ctx.handles("rollout")
    scratch = tempfile.mkdtemp(prefix="refs-demo-")

    def engines_equal_trainer(version: str) -> dict[str, bool]:
        reference = build_model_from_named_tensors(model, read_weights_dir(trainer.save_hf_checkpoint(
            f"{scratch}/{version}")))  # fmt: skip
        urls = controller.engine_urls().result(timeout=30)
        return {url: all(torch.equal(_engine_weight(url, name), param.detach())
                         for name, param in reference.named_parameters()) for url in urls}  # fmt: skip

    controller.start().result(timeout=300)
    try:
        board = run_loop(settings, trainer, controller, rollout)
        report: dict[str, Any] = {"after_loop": engines_equal_trainer(f"v{settings.iterations}")}
        before = controller.cells().result(timeout=10)
        victim = next(cell for cell, view in zip(before, pool_cells(ctx.provider_api, "engines"), strict=True)
                      if view["host"] == "h2")  # fmt: skip
        os.kill(victim["pid"], signal.SIGKILL)

        def replaced() -> dict[str, Any] | None:
            cell = controller.cells().result(timeout=10)[before.index(victim)]
            return cell if cell["pid"] not in (victim["pid"], None) and cell["state"] in ("pending_weights", "serving")\
                else None  # fmt: skip

        report["replaced"] = wait("the killed engine actor replaced", replaced, 120)
        sync = WeightSync(trainer, controller, over_refs=True)
        sync.update("after-restart")
        assert sync.refs is not None and sync.refs.group is not None
        report["group_after_restart"] = sync.refs.group.name
        report["after_restart"] = engines_equal_trainer("after-restart")
        report["versions"] = [requests.get(u + "/get_model_info", timeout=10).json()["weight_version"]
                              for u in controller.engine_urls().result(timeout=30)]  # fmt: skip
        report["victim"] = victim
        sync.close()
    finally:
        controller.shutdown().result(timeout=60)
    print("REFS " + json.dumps(report), flush=True)
    return finish(board, settings)


def _engine_weight(url: str, name: str) -> Any:
    import torch

    reply = requests.post(url + "/get_weights_by_name", json={"name": name, "truncate_size": 1 << 20}, timeout=30)
    reply.raise_for_status()
    return torch.tensor(reply.json())
