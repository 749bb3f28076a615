"""Fixtures for the fault-injection tests: a lossy link process, CURVE keys, a real Prometheus server.

Every process a fixture starts is stopped by pid when the test ends, also on failure; tests also use the
``no_leaks`` fixture, which fails a test that leaves a child process behind.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fault_helpers import HERE, LossyLinkProcess, PrometheusServer, free_port, read_line, stop_process

from transport import security


@pytest.fixture
def lossy_link(no_leaks: None) -> Iterator[Callable[..., LossyLinkProcess]]:
    """Factory: ``lossy_link(target, drop=, dup=, delay=, max_delay=, seed=)`` starts a proxy to ``target``."""
    started: list[LossyLinkProcess] = []

    def start(target: str, **options: float) -> LossyLinkProcess:
        argv = [sys.executable, str(HERE / "lossy_proxy.py"), "--target", target]
        for key, value in options.items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        popen = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        link = LossyLinkProcess(popen, "")
        started.append(link)
        link.address = read_line(popen, "LOSSY_PROXY_READY ", 20)["address"]
        return link

    try:
        yield start
    finally:
        for link in started:
            link.stop()


@pytest.fixture
def curve_dir(tmp_path: Path) -> str:
    """A fresh set of cluster keys."""
    return security.generate_cluster_keys(tmp_path / "cluster-keys").directory


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[str], PrometheusServer]]:
    """Factory: ``prometheus(sd_url)`` starts Prometheus scraping every target the HTTP SD endpoint lists."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus server is not installed (Debian package `prometheus`)")
    started: list[subprocess.Popen[bytes]] = []

    def start(sd_url: str) -> PrometheusServer:
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: miles\n    http_sd_configs:\n"
            f"      - url: {sd_url}\n        refresh_interval: 1s\n"
        )
        port = free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        popen = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        started.append(popen)
        server = PrometheusServer(popen, f"http://127.0.0.1:{port}")
        server.wait_ready(30)
        return server

    try:
        yield start
    finally:
        for popen in started:
            stop_process(popen)
