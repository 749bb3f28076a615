"""Prometheus metrics: every actor process serves ``/metrics``; actors add their own series::

    from runtime import metrics

    REWARD = metrics.counter("reward_total", "Sum of rewards", labels=["task"])
    LOSS = metrics.gauge("train_loss", "Loss of the last step")
    STEP = metrics.histogram("step_seconds", "Time per step", buckets=[0.1, 1, 10, 60])
    REWARD.labels(task="math").inc(0.5)

Asking again for a name returns the same object (a constructor that runs twice is fine); another type or labels is
an error. The runtime's own series are ``miles_actor_*`` (:mod:`runtime.server_metrics`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

#: Name prefix of the runtime's own series; refused for actor code.
RESERVED_PREFIX = "miles_"

_registry: CollectorRegistry | None = None
_lock = threading.Lock()
_series: dict[str, tuple[type, tuple[str, ...], Any]] = {}


def registry() -> CollectorRegistry:
    """This process's registry (created on first use, with process, platform and GC collectors: prometheus-client's
    ``process_*`` and ``python_*`` series).

    One per process, never prometheus-client's global one. An actor process serves it on the port given by
    ``python -m runtime.worker --metrics-port`` (0: any free port; reported as ``metrics_port`` in the ready line,
    in ``__health__`` and on the handle); a driver may serve it with :func:`serve` (e.g. the spawner's
    ``miles_spawned_actor_restarts``)."""
    global _registry
    with _lock:
        if _registry is None:
            fresh = CollectorRegistry(auto_describe=True)
            ProcessCollector(registry=fresh)
            PlatformCollector(registry=fresh)
            GCCollector(registry=fresh)
            _registry = fresh
        return _registry


def _series_for(kind: type, name: str, documentation: str, labels: Sequence[str], **options: Any) -> Any:
    if not isinstance(name, str) or not name:
        raise ValueError(f"metric name must be a non-empty string, got {name!r}")
    if isinstance(labels, str):
        raise TypeError(f"labels of metric {name!r} must be a list of names, not the string {labels!r}")
    label_names = tuple(labels)
    reg = registry()
    with _lock:
        known = _series.get(name)
        if known is not None:
            if known[0] is not kind or known[1] != label_names:
                raise ValueError(
                    f"metric {name!r} already exists as a {known[0].__name__} with labels {list(known[1])}; "
                    f"cannot make it a {kind.__name__} with labels {list(label_names)}: use another name"
                )
            return known[2]
        series = kind(name, documentation, label_names, registry=reg, **options)
        _series[name] = (kind, label_names, series)
        return series


def _check_user_name(name: str) -> None:
    if isinstance(name, str) and name.startswith(RESERVED_PREFIX):
        raise ValueError(f"metric name {name!r}: the prefix {RESERVED_PREFIX!r} is reserved for the runtime")


def counter(name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
    """A counter in this process's registry (``name`` may end in ``_total``); a prometheus-client object."""
    _check_user_name(name)
    return _series_for(Counter, name, documentation, labels)


def gauge(name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
    """A gauge in this process's registry."""
    _check_user_name(name)
    return _series_for(Gauge, name, documentation, labels)


def histogram(
    name: str, documentation: str, labels: Sequence[str] = (), buckets: Sequence[float] | None = None
) -> Histogram:
    """A histogram in this process's registry; ``buckets`` are upper bounds (prometheus-client's by default)."""
    _check_user_name(name)
    options = {"buckets": tuple(buckets)} if buckets is not None else {}
    return _series_for(Histogram, name, documentation, labels, **options)


def runtime_counter(name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
    """A ``miles_*`` counter for the runtime itself (not for actor code)."""
    return _series_for(Counter, name, documentation, labels)


def register_collector(collector: Collector) -> None:
    """Add a custom collector (read at scrape time) to this process's registry."""
    registry().register(collector)


class MetricsServer:
    """The HTTP endpoint serving a registry at ``/metrics`` (prometheus-client's threaded WSGI server)."""

    def __init__(self, host: str, port: int, reg: CollectorRegistry) -> None:
        if not isinstance(port, int) or not 0 <= port < 65536:
            raise ValueError(f"metrics port must be an int in 0..65535 (0: any free port), got {port!r}")
        try:
            self._httpd, self._thread = start_http_server(port, addr=host, registry=reg)
        except OSError as exc:
            raise OSError(f"cannot serve metrics on {host}:{port}: {exc}") from exc
        self.host = host
        self.port: int = self._httpd.server_port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop serving; waits at most ``timeout_s`` for the server thread."""
        stopper = threading.Thread(target=self._httpd.shutdown, name="metrics-shutdown", daemon=True)
        stopper.start()
        stopper.join(timeout_s)
        self._httpd.server_close()
        self._thread.join(max(0.0, timeout_s))
        if self._thread.is_alive():
            log.warning("metrics server on port %d did not stop within %.1f s", self.port, timeout_s)


def serve(port: int = 0, host: str = "127.0.0.1") -> MetricsServer:
    """Serve this process's registry on ``host:port`` (0: any free port); returns the server (``.port``)."""
    return MetricsServer(host, port, registry())


def host_of_bind(bind: str) -> str:
    """The interface to serve metrics on for an actor bound to ``bind`` (``tcp://*:0`` → all interfaces)."""
    _, _, rest = bind.partition("://")
    host = rest.rpartition(":")[0] if ":" in rest else rest
    host = host.strip("[]")
    return "0.0.0.0" if host in ("", "*") else host
