"""How long the engines generated: each engine's ``sglang:func_latency_seconds{name="run_batch"}`` (the CPU
engine's compute thread running a batch), read from its ``/metrics`` at the start and the end of a loop.
"""

from __future__ import annotations

import logging
import re
import urllib.request

logger = logging.getLogger(__name__)

_RUN_BATCH = re.compile(r'^sglang:func_latency_seconds_sum\{[^}]*name="run_batch"[^}]*\}\s+([0-9.eE+-]+)', re.M)
MAX_METRICS_BYTES = 4 << 20


def generating_seconds(urls: list[str], timeout_s: float = 5.0) -> dict[str, float]:
    """``{engine url: seconds spent in run_batch so far}`` for the engines that answer."""
    seconds: dict[str, float] = {}
    for url in urls:
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout_s) as reply:
                text = reply.read(MAX_METRICS_BYTES).decode(errors="replace")
        except OSError as exc:
            logger.warning("engine %s: /metrics unreadable (%s); left out of engine_busy_fraction", url, exc)
            continue
        match = _RUN_BATCH.search(text)
        seconds[url] = float(match.group(1)) if match else 0.0
    return seconds


def busy_fraction(before: dict[str, float], after: dict[str, float], wall_s: float) -> float:
    """``engine_busy_fraction``: the mean over the engines read at the end of (seconds generating since ``before`` /
    ``wall_s``). An engine restarted in between (new URL, counters from zero) counts from its start; one that cannot
    be read is left out (logged by :func:`generating_seconds`)."""
    if not after or wall_s <= 0:
        return 0.0
    spent = [max(0.0, value - before.get(url, 0.0)) for url, value in after.items()]
    return min(1.0, sum(spent) / len(spent) / wall_s)
