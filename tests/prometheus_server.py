"""A real Prometheus server (Debian package ``prometheus``) on loopback for launcher tests; stopped by pid."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.processes import free_port as _free_port


def prometheus_binary() -> str | None:
    """The prometheus executable, or None."""
    return shutil.which("prometheus")


def _get(url: str, timeout_s: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.read()


@dataclass
class Prometheus:
    """A running Prometheus: ``query()`` and ``active_targets()`` use its HTTP API."""

    popen: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        body = json.loads(_get(f"{self.url}/api/v1/{path}{query}"))
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query; the result vector."""
        return self.api("query", query=promql)["result"]

    def active_targets(self, scrape_pool: str) -> list[dict[str, Any]]:
        """Targets Prometheus currently scrapes for one job (scrape pool)."""
        return [t for t in self.api("targets", state="active")["activeTargets"] if t["scrapePool"] == scrape_pool]

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM, SIGKILL after ``grace_s``; always reaped."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5.0)


def start_prometheus(workdir: Path, sd_url: str, file_sd: Path | None = None, timeout_s: float = 30.0) -> Prometheus:
    """Prometheus on 127.0.0.1:<free>, scraping every 1 s what the launcher's HTTP SD (job ``miles``) and, if
    given, its file_sd JSON (job ``miles-file``) list; ready (or stopped and failed) within ``timeout_s``."""
    binary = prometheus_binary()
    assert binary is not None, "prometheus is not installed"
    config = workdir / "prometheus.yml"
    text = (
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: miles\n    http_sd_configs:\n"
        f"      - url: {sd_url}\n        refresh_interval: 1s\n"
    )
    if file_sd is not None:
        text += (
            "  - job_name: miles-file\n    file_sd_configs:\n"
            f"      - files: ['{file_sd}']\n        refresh_interval: 1s\n"
        )
    config.write_text(text)
    port = _free_port()
    log_path = workdir / "prometheus.log"
    with log_path.open("wb") as log:
        popen = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Prometheus(popen, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise AssertionError(f"prometheus exited with code {popen.returncode}: {log_path.read_text()[-2000:]}")
        with contextlib.suppress(OSError, urllib.error.URLError):
            if _get(f"{server.url}/-/ready", timeout_s=2).strip():
                return server
        time.sleep(0.2)
    server.stop()
    raise AssertionError(f"prometheus was not ready within {timeout_s}s: {log_path.read_text()[-2000:]}")
