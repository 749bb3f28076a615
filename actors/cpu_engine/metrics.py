"""Prometheus metrics of the CPU engine, named like SGLang's (``sglang:*``), in a private registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class EngineMetrics:
    """Gauges and counters labelled with ``model_name``; :meth:`render` gives the text exposition."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name"]

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=self.registry)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=self.registry)

        self.num_running_reqs = gauge("sglang:num_running_reqs", "Requests in the running batch.").labels(model_name)
        self.num_queue_reqs = gauge("sglang:num_queue_reqs", "Requests waiting (queued or paused).").labels(model_name)
        self.gen_throughput = gauge("sglang:gen_throughput", "Tokens/s of the last batch.").labels(model_name)
        self.is_paused = gauge("sglang:is_paused", "1 while generation is paused.").labels(model_name)
        self.prompt_tokens = counter("sglang:prompt_tokens", "Prompt tokens processed.").labels(model_name)
        self.generation_tokens = counter("sglang:generation_tokens", "Tokens generated.").labels(model_name)
        self.num_requests = counter("sglang:num_requests", "Requests finished.").labels(model_name)
        self.num_aborted_requests = counter("sglang:num_aborted_requests", "Requests aborted.").labels(model_name)
        self.weight_updates = counter("sglang:weight_updates", "Successful weight updates.").labels(model_name)
        self.e2e_request_latency = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Time from arrival to completion of a request.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        ).labels(model_name)

    def render(self) -> bytes:
        return generate_latest(self.registry)
