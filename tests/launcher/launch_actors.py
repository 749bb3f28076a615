"""Actor classes for launcher tests (workers import them via PYTHONPATH=tests/launcher)."""

from __future__ import annotations

import os
import signal
import socket
import time
from typing import Any

from runtime import ActorHandle, get_actor, metrics, placement, spawn


class Counter:
    """A counter that can report where it runs and call a peer actor; exports user metrics."""

    def __init__(self, *, start: int = 0) -> None:
        self.value = start
        self.adds = metrics.counter("launch_counter_adds_total", "Calls of Counter.add")
        self.gauge = metrics.gauge("launch_counter_value", "The counter's value")
        self.gauge.set(start)
        self.children: dict[tuple[str, str], ActorHandle] = {}

    def add(self, n: int) -> int:
        """Add ``n``; the new value."""
        self.value += n
        self.adds.inc()
        self.gauge.set(self.value)
        return self.value

    def say(self, text: str) -> str:
        """Print ``text`` (actor output the launcher's console shows); returns it."""
        print(text, flush=True)
        return text

    def nodes(self) -> list[Any]:
        """The launch's hosts as this worker's placement API answers (runtime.placement)."""
        return placement.nodes()

    def sleep(self, seconds: float) -> float:
        """Block the default lane for ``seconds``."""
        time.sleep(seconds)
        return seconds

    def where(self) -> dict[str, Any]:
        """Identity and plan-provided environment of this process."""
        keys = (
            "MILES_HOST",
            "MILES_WORKER_ID",
            "MILES_CELL_ID",
            "CUDA_VISIBLE_DEVICES",
            "LOCAL_RANK",
            "RANK",
            "WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "MILES_CURVE_DIR",
        )
        return {"pid": os.getpid(), "hostname": socket.gethostname(), **{k: os.environ.get(k) for k in keys}}

    async def add_on_peer(self, peer: ActorHandle, n: int) -> int:
        """Call ``peer.add(n)`` from inside this actor (a cross-host call when the peer is elsewhere)."""
        return await peer.add(n)

    async def relay(self, peer: ActorHandle, value: Any) -> list[Any]:
        """Send ``value`` to ``peer``'s echo and return what came back, with this process's id."""
        return [await peer.echo(value), os.getpid()]

    def echo(self, value: Any) -> Any:
        return value

    async def route_to(self, peer: ActorHandle) -> str:
        """Call ``peer`` once; the address this actor's socket to it is connected to (TCP or a same-host twin)."""
        await peer.add(0)
        return str(peer.connection.transport_address)

    async def add_on_named(self, name: str, n: int, namespace: str = "") -> int:
        """Look the peer up by name (the launch's name service) and call it."""
        return await get_actor(name, namespace=namespace).add(n)

    def spawn_named(self, name: str, namespace: str, get_if_exists: bool) -> dict[str, Any]:
        """Spawn a named Counter child on this host (or get the live holder); where it is."""
        child = spawn(
            "launch_actors:Counter", kwargs={"start": 0}, name=name, namespace=namespace, get_if_exists=get_if_exists
        )
        if child.process is not None:  # ours: it lives as long as this actor holds it
            self.children[(namespace, name)] = child
        return {"endpoint": child.endpoint, "pid": child.pid, "host": os.environ.get("MILES_HOST")}

    def kill_child(self, name: str, namespace: str) -> int:
        """SIGKILL the named child's process (its name stays registered, held by a dead actor); its pid."""
        child = self.children.pop((namespace, name))
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while child.dead is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return child.pid

    def crash(self, code: int) -> None:
        """Exit the process abruptly."""
        os._exit(code)

    def call_probe(self, probe: ActorHandle) -> dict[str, Any]:
        """Call a probe placed elsewhere (a handle another process spawned)."""
        return probe.where().result(timeout=30)

    def seconds_until_dead(self, probe: ActorHandle | None = None, timeout_s: float = 20.0) -> list[Any]:
        """How long until calls to ``probe`` (default: the probe this actor placed) fail, and how they fail."""
        if probe is None:
            probe = next(child for (kind, _), child in self.children.items() if kind == "placed")
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            try:
                probe.where().result(timeout=timeout_s)
            except Exception as exc:
                return [time.monotonic() - started, f"{type(exc).__name__}: {exc}"]
            time.sleep(0.05)
        return [timeout_s, "still answering"]

    def place(self, resources: dict[str, float], host: str | None) -> dict[str, Any]:
        """Spawn a Probe on a host of the launch that has ``resources`` free (held while this actor lives)."""
        child = spawn("launch_actors:Probe", resources=resources, host=host)
        self.children[("placed", str(child.pid))] = child
        return child.where().result(timeout=30)


class Probe:
    """A placed actor that says where it runs and what it was given."""

    def __init__(self, *, fail: bool = False) -> None:
        if fail:
            print("the probe cannot start here", flush=True)
            raise RuntimeError("no probe today")

    def where(self) -> dict[str, Any]:
        """Host, pid, GPUs and lease, as the launcher set them."""
        env = os.environ
        return {
            "host": env.get("MILES_HOST"),
            "pid": os.getpid(),
            "cuda": env.get("CUDA_VISIBLE_DEVICES"),
            "lease": env.get("MILES_PLACEMENT_LEASE"),
            "node_id": env.get("MILES_NODE_ID"),
        }


class SlowStart:
    """An actor whose constructor takes ``seconds`` (a trainer importing Megatron and joining its group)."""

    def __init__(self, *, seconds: float) -> None:
        time.sleep(seconds)

    def ping(self) -> str:
        """Answer once constructed."""
        return "pong"
