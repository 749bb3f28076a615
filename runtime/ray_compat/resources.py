"""The cluster as ``ray.nodes()`` / ``ray.cluster_resources()`` show it, and who holds which part of it."""

from __future__ import annotations

import json
import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

_EPS = 1e-9


def _visible_gpus() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    try:
        names = os.listdir("/dev")
    except OSError:
        return []
    return sorted(
        (n[len("nvidia") :] for n in names if n.startswith("nvidia") and n[len("nvidia") :].isdigit()), key=int
    )


@dataclass
class Ledger:
    """What this machine offers and what is held, by resource name (``CPU``, ``GPU``, custom ones).

    Actors and tasks of ``runtime.ray_compat`` run on this machine (``spawn``), so this machine's CPUs, GPUs and the
    resources ``ray.init(resources=...)`` names are what actors and placement-group bundles reserve. GPUs are real
    ids: an actor with ``num_gpus=1`` gets one in ``CUDA_VISIBLE_DEVICES`` and ``get_accelerator_ids()``, and no
    other actor gets it while it lives. A request that cannot be met raises at once (Ray would leave it pending)."""

    total: dict[str, float]
    gpu_ids: list[str]
    held: dict[str, float] = field(default_factory=dict)
    free_gpus: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.free_gpus = list(self.gpu_ids)

    def reserve(self, wants: dict[str, float], what: str) -> tuple[dict[str, float], list[str]]:
        """Hold ``wants`` (and GPU ids for ``GPU``); raises ValueError naming what is short."""
        with self.lock:
            for name, amount in wants.items():
                if amount < 0:
                    raise ValueError(f"{what}: {name}={amount} is negative")
                free = self.total.get(name, 0.0) - self.held.get(name, 0.0)
                if amount > free + _EPS:
                    raise ValueError(
                        f"{what} asks for {name}={amount:g} but this cluster has {free:g} free of "
                        f"{self.total.get(name, 0.0):g} (Ray would wait for it forever; ray.init(num_cpus=, "
                        "num_gpus=, resources=) sets what there is, and killed actors give theirs back)"
                    )
            gpus = wants.get("GPU", 0.0)
            if gpus and gpus != int(gpus) and gpus > 1:
                raise ValueError(f"{what}: num_gpus={gpus:g}: fractions are supported below 1 only")
            ids = [self.free_gpus.pop(0) for _ in range(int(gpus))] if gpus >= 1 else []
            if 0 < gpus < 1:
                ids = self.gpu_ids[:1]  # a fraction shares the first GPU, as several small actors do in Ray
            for name, amount in wants.items():
                self.held[name] = self.held.get(name, 0.0) + amount
            return dict(wants), ids

    def release(self, held: dict[str, float], gpu_ids: list[str]) -> None:
        with self.lock:
            for name, amount in held.items():
                self.held[name] = max(0.0, self.held.get(name, 0.0) - amount)
            if held.get("GPU", 0.0) >= 1:
                self.free_gpus.extend(g for g in gpu_ids if g not in self.free_gpus)

    def available(self) -> dict[str, float]:
        with self.lock:
            return {name: amount - self.held.get(name, 0.0) for name, amount in self.total.items()}


def make_ledger(num_cpus: float | None, num_gpus: float | None, resources: dict[str, float] | None) -> Ledger:
    gpu_ids = _visible_gpus()
    if num_gpus is not None:
        if num_gpus > len(gpu_ids):
            gpu_ids = gpu_ids + [str(i) for i in range(len(gpu_ids), int(num_gpus))]  # declared, as Ray takes it
        gpu_ids = gpu_ids[: int(num_gpus)]
    total = {"CPU": float(num_cpus if num_cpus is not None else (os.cpu_count() or 1)), "GPU": float(len(gpu_ids))}
    for name, amount in (resources or {}).items():
        if name in ("CPU", "GPU") or not isinstance(amount, (int, float)) or amount < 0:
            raise ValueError(
                f"ray.init(resources={{{name!r}: {amount!r}}}): use num_cpus/num_gpus for CPU/GPU; amounts >= 0"
            )
        total[name] = float(amount)
    total[f"node:{node_ip()}"] = 1.0
    return Ledger(total, gpu_ids)


def node_ip() -> str:
    return os.environ.get("MILES_ADVERTISE_HOST") or "127.0.0.1"


def get_node_ip_address(address: str | None = None) -> str:
    """``ray.util.get_node_ip_address()``: the address other hosts reach this one at (``MILES_ADVERTISE_HOST``,
    which miles-launch sets; else loopback, as every actor of a plain ``ray.init`` is on this machine)."""
    return node_ip()


def node_id() -> str:
    return f"{socket.gethostname()}-{node_ip()}"


def nodes(ledger: Ledger) -> list[dict[str, Any]]:
    """``ray.nodes()``: this machine (its resources), then the other hosts of the launch this job runs in
    (``MILES_LAUNCH_POOLS``), whose actors the launcher places (hosts.toml), not this module."""
    host = socket.gethostname()
    found = [_node(node_id(), node_ip(), host, dict(ledger.total), local=True)]
    pools = os.environ.get("MILES_LAUNCH_POOLS")
    hosts: list[str] = []
    if pools:
        try:
            hosts = sorted({addr.rpartition(":")[0] for addrs in json.loads(pools).values() for addr in addrs})
        except (ValueError, AttributeError):
            hosts = []
    for other in hosts:
        if other not in (node_ip(), "127.0.0.1", "localhost"):
            found.append(_node(f"launch-{other}", other, other, {}, local=False))
    return found


def _node(node: str, address: str, hostname: str, resources: dict[str, float], *, local: bool) -> dict[str, Any]:
    return {
        "NodeID": node,
        "Alive": True,
        "NodeManagerAddress": address,
        "NodeManagerHostname": hostname,
        "Resources": resources,
        "local": local,
    }
