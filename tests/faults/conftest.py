"""Fixtures for the fault-injection tests: a lossy link process, CURVE keys, a real Prometheus server.

Every process a fixture starts is stopped by pid when the test ends, also on failure; tests also use the
``no_leaks`` fixture, which fails a test that leaves a child process behind.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fault_helpers import HERE, LossyLinkProcess, read_line

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
