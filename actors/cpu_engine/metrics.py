"""Prometheus metrics of the CPU engine, named like SGLang's (``sglang:*``), in a private registry.

Names and labels follow SGLang 0.5.23's ``srt/observability/metrics_collector.py`` and ``func_timer.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TOKEN_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
if TYPE_CHECKING:
    from actors.cpu_engine.generation import Sequence

FUNC_LATENCY_BUCKETS = tuple(0.05 * 1.5**i for i in range(18))  # SGLang's exponential_buckets(0.05, 1.5, 18)


class EngineMetrics:
    """Gauges and counters labelled with ``model_name``; :meth:`render` gives the text exposition."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, model_name: str) -> None:
        # metrics_collector.py labels every metric with ``model_name``; func_timer.py's
        # ``sglang:func_latency_seconds`` (below) is labelled with the function's ``name`` instead.
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
        self.token_usage = gauge("sglang:token_usage", "The token usage.").labels(model_name)
        self.cache_hit_rate = gauge("sglang:cache_hit_rate", "The prefix cache hit rate.").labels(model_name)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=self.registry)

        self.e2e_request_latency = histogram(
            "sglang:e2e_request_latency_seconds", "Time from arrival to completion of a request.", LATENCY_BUCKETS
        ).labels(model_name)
        self.time_to_first_token = histogram(
            "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", LATENCY_BUCKETS
        ).labels(model_name)
        self.time_per_output_token = histogram(
            "sglang:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            TOKEN_LATENCY_BUCKETS,
        ).labels(model_name)
        self.func_latency = Histogram(
            "sglang:func_latency_seconds",
            "Function latency in seconds",
            ["name"],
            buckets=FUNC_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._prompt_seen = 0
        self._prompt_cached = 0

    def record_prefix(self, prompt_tokens: int, cached_tokens: int) -> None:
        """Count a request's prompt against the prefix cache; ``cache_hit_rate`` is the running ratio."""
        self._prompt_seen += prompt_tokens
        self._prompt_cached += cached_tokens
        self.cache_hit_rate.set(self._prompt_cached / self._prompt_seen if self._prompt_seen else 0.0)

    def record_finished(self, seq: Sequence, now: float) -> None:
        """Count a finished sequence: tokens, request, latencies, prefix-cache use and whether it was aborted."""
        self.generation_tokens.inc(len(seq.output_ids))
        self.prompt_tokens.inc(len(seq.item.input_ids))
        self.num_requests.inc()
        self.e2e_request_latency.observe(now - seq.created_at)
        self.record_prefix(len(seq.item.input_ids), seq.cached_tokens)
        if seq.first_token_at is not None:
            self.time_to_first_token.observe(seq.first_token_at - seq.created_at)
            if len(seq.output_ids) > 1:
                self.time_per_output_token.observe((now - seq.first_token_at) / (len(seq.output_ids) - 1))
        if seq.finish_reason and seq.finish_reason["type"] == "abort":
            self.num_aborted_requests.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
