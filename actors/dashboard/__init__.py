"""The run dashboard: producers record samples and step metrics, a collector appends them to JSONL, a small HTTP
server shows them (``miles-dashboard RUN_DIR``).

- :class:`DashboardRecorder` (``recorder.py``): in the rollout executor and the trainer; never blocks.
- :class:`DashboardCollector` (``collector.py``): the actor that writes ``RUN_DIR/samples.jsonl`` and
  ``RUN_DIR/steps.jsonl`` (format in ``records.py``).
- :class:`DashboardServer` (``server.py``, ``api.py``, ``static/``): the page and ``/api/``, reading the files
  as they grow (``run_store.py``, ``jsonl_tail.py``).
"""

from actors.lazy_exports import lazy_getattr

# Imported on first use: miles-dashboard (the server) needs neither the actor runtime nor psutil.
__getattr__ = lazy_getattr(__name__, {
    "DashboardCollector": "actors.dashboard.collector",
    "DashboardRecorder": "actors.dashboard.recorder",
    "DashboardServer": "actors.dashboard.server",
})  # fmt: skip

__all__ = ["DashboardCollector", "DashboardRecorder", "DashboardServer"]
