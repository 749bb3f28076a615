"""The runtime's series of an actor process, read from the ActorServer when Prometheus scrapes.

README "Prometheus" lists the ``miles_actor_*`` series. The call path pays one dict lookup and three increments on
a shard its thread owns (no lock); merging shards and everything else happens at scrape time.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from runtime import metrics
from runtime.actor.call_store import CallState
from runtime.objects import object_store
from transport import sealed_pickle

if TYPE_CHECKING:
    from runtime.actor.actor_server import ActorServer

#: Upper bounds (s) of the call latency histogram: 50 µs (a no-op call) to 5 min (a training step).
CALL_BUCKETS: tuple[float, ...] = (
    5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0,
)  # fmt: skip


class CallStats:
    """Call counts and latency buckets by (method, outcome), kept lock-free in one shard per thread."""

    def __init__(self, buckets: tuple[float, ...] = CALL_BUCKETS) -> None:
        self.bounds = buckets
        self._local = threading.local()
        self._shards: list[dict[tuple[str, str], list[Any]]] = []
        self._shards_lock = threading.Lock()

    def observe(self, method: str, outcome: str, seconds: float) -> None:
        """Record one finished call (an ActorServer hook: runs on the thread that ran the call)."""
        try:
            shard = self._local.shard
        except AttributeError:
            shard = self._new_shard()
        entry = shard.get((method, outcome))
        if entry is None:
            entry = shard[(method, outcome)] = [0.0, [0] * (len(self.bounds) + 1)]
        entry[0] += seconds
        entry[1][bisect.bisect_left(self.bounds, seconds)] += 1

    def _new_shard(self) -> dict[tuple[str, str], list[Any]]:
        shard: dict[tuple[str, str], list[Any]] = {}
        with self._shards_lock:
            self._shards.append(shard)
        self._local.shard = shard
        return shard

    def snapshot(self) -> dict[tuple[str, str], tuple[float, list[int]]]:
        """(sum of seconds, count per bucket) by (method, outcome), merged over threads."""
        with self._shards_lock:
            shards = list(self._shards)
        merged: dict[tuple[str, str], tuple[float, list[int]]] = {}
        for shard in shards:
            for key, (total, counts) in list(shard.items()):  # list(): one step under the GIL
                counts = list(counts)
                if key in merged:
                    old_total, old_counts = merged[key]
                    merged[key] = (old_total + total, [a + b for a, b in zip(old_counts, counts, strict=True)])
                else:
                    merged[key] = (total, counts)
        return merged


class ActorServerCollector(Collector):
    """Reads an ActorServer's state at scrape time."""

    def __init__(self, server: ActorServer, calls: CallStats) -> None:
        self.server = server
        self.calls = calls

    def collect(self) -> Iterator[Any]:
        server = self.server
        info = server.info
        actor_class = info.path if info is not None else ""
        yield from self._calls(actor_class)
        yield from self._lanes(actor_class)
        yield from self._traffic()
        yield from self._store()
        restarts = GaugeMetricFamily("miles_actor_restarts", "Times this actor was restarted before this incarnation")
        restarts.add_metric([], server.restarts)
        yield restarts
        identity = InfoMetricFamily("miles_actor", "Which actor this process serves", labels=[])
        identity.add_metric(
            [],
            {
                "actor": server.name,
                "actor_class": actor_class,
                "boot_id": server.boot_id,
                "host": server.host,
                "pid": str(server.pid),
            },
        )
        yield identity

    def _calls(self, actor_class: str) -> Iterator[Any]:
        # outcome: ok, error (the method raised), deadline, rejected (bad arguments)
        labels = ["actor_class", "method", "outcome"]
        total = CounterMetricFamily("miles_actor_calls", "Calls finished, by outcome", labels=labels)
        latency = HistogramMetricFamily(
            "miles_actor_call_seconds", "Time from a call's start on its lane to its result", labels=labels[:2]
        )
        per_method: dict[str, tuple[float, list[int]]] = {}
        for (method, outcome), (seconds, counts) in sorted(self.calls.snapshot().items()):
            total.add_metric([actor_class, method, outcome], sum(counts))
            if method in per_method:
                old_seconds, old_counts = per_method[method]
                per_method[method] = (old_seconds + seconds, [a + b for a, b in zip(old_counts, counts, strict=True)])
            else:
                per_method[method] = (seconds, counts)
        bounds = [*map(floatToGoString, self.calls.bounds), "+Inf"]
        for method, (seconds, counts) in per_method.items():
            cumulative, running = [], 0
            for bound, count in zip(bounds, counts, strict=True):
                running += count
                cumulative.append((bound, running))
            latency.add_metric([actor_class, method], cumulative, seconds)
        yield total
        yield latency

    def _lanes(self, actor_class: str) -> Iterator[Any]:
        server = self.server
        store = server.store
        in_flight = sum(1 for record in list(store.records.values()) if record.state is CallState.RUNNING)
        gauge = GaugeMetricFamily(
            "miles_actor_calls_in_flight", "Calls accepted and not finished", labels=["actor_class"]
        )
        gauge.add_metric([actor_class], in_flight)
        yield gauge
        running = GaugeMetricFamily("miles_actor_calls_running", "Calls running now, by lane", labels=["lane"])
        queued = GaugeMetricFamily("miles_actor_calls_queued", "Calls waiting for a lane thread", labels=["lane"])
        for lane, (busy, waiting) in sorted(server.lane_load().items()):
            running.add_metric([lane], busy)
            queued.add_metric([lane], waiting)
        yield running
        yield queued
        stats = dict(server.stats)
        yield CounterMetricFamily(
            "miles_actor_calls_refused",
            "Calls refused before running (unknown method, not constructed, over capacity)",
            value=stats.get("rejected_total", 0),
        )
        yield CounterMetricFamily(
            "miles_actor_duplicate_submits",
            "Resent SUBMITs recognised by call id and answered without running again",
            value=stats.get("duplicates_total", 0),
        )

    def _traffic(self) -> Iterator[Any]:
        # the actor's socket only: bytes that went through shared memory are not counted
        endpoint = self.server.endpoint
        if endpoint is None:
            return
        stats = endpoint.stats
        for name, value, doc in (
            ("miles_actor_bytes_received", stats.bytes_in, "Bytes received on the actor's socket"),
            ("miles_actor_bytes_sent", stats.bytes_out, "Bytes sent on the actor's socket"),
            ("miles_actor_messages_received", stats.messages_in, "Messages received on the actor's socket"),
            ("miles_actor_messages_sent", stats.messages_out, "Messages sent on the actor's socket"),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        dropped = CounterMetricFamily("miles_actor_dropped_messages", "Messages dropped, by reason", labels=["reason"])
        for reason, count in sorted(dict(stats.dropped).items()):
            dropped.add_metric([reason], count)
        yield dropped
        refused = CounterMetricFamily(
            "miles_actor_pickles_refused", "Pickled values refused unread (transport.sealed_pickle)", labels=["reason"]
        )
        for reason, count in sorted(sealed_pickle.REFUSED.items()):
            refused.add_metric([reason], count)
        yield refused

    def _store(self) -> Iterator[Any]:
        store = self.server.store
        for name, value, doc in (
            ("miles_actor_call_store_bytes", store.nbytes, "Bytes held by the call store (arguments and results)"),
            ("miles_actor_call_store_records", len(store.records), "Calls recorded (running or unacknowledged)"),
            ("miles_actor_call_store_tombstones", len(store.tombstones), "Acknowledged call ids remembered"),
            ("miles_actor_object_refs", len(object_store.store), "Values held for ObjectRefs"),
        ):
            yield GaugeMetricFamily(name, doc, value=value)


def install(server: ActorServer) -> CallStats:
    """Count the server's calls and export its state in this process's registry."""
    calls = CallStats()
    metrics.register_collector(ActorServerCollector(server, calls))
    server.hooks.append(calls.observe)
    return calls
