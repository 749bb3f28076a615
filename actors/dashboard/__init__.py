"""The run dashboard: producers record samples and step metrics, a collector appends them to JSONL, a small HTTP
server shows them (``miles-dashboard RUN_DIR``).
"""

from actors.lazy_exports import lazy_getattr

# Imported on first use: miles-dashboard (the server) needs neither the actor runtime nor psutil.
__getattr__ = lazy_getattr(__name__, {
    # The actor that writes RUN_DIR/samples.jsonl and RUN_DIR/steps.jsonl (format in records.py).
    "DashboardCollector": "actors.dashboard.collector",
    # In the rollout executor and the trainer; never blocks.
    "DashboardRecorder": "actors.dashboard.recorder",
    # The page and /api/ (server.py, api.py, static/), reading the files as they grow (run_store.py, jsonl_tail.py).
    "DashboardServer": "actors.dashboard.server",
})  # fmt: skip

__all__ = ["DashboardCollector", "DashboardRecorder", "DashboardServer"]
