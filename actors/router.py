"""Launching and driving the real sglang-router (``python -m sglang_router.launch_router``).

Written against sglang-router 0.3.2; each fact of its HTTP API this relies on is noted where it is used.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from actors.processes import terminate_group

logger = logging.getLogger(__name__)

POLL_S = 0.1


class RouterError(RuntimeError):
    """The router did not start, answer, or do what was asked in time; the message names router and worker."""


class RouterProcess:
    """One sglang-router process in its own process group; use as a context manager or start()/stop().

    The router forwards SGLang ``/generate`` bodies but drops unknown sampling fields (``sampling_params.seed`` is
    dropped; ``sampling_seed`` passes) and takes one ``sampling_params`` object."""

    def __init__(
        self,
        *,
        port: int,
        prometheus_port: int,
        host: str = "127.0.0.1",
        worker_urls: Sequence[str] = (),
        policy: str = "cache_aware",
        health_check_interval_s: int = 5,
        health_failure_threshold: int = 2,
        worker_startup_timeout_s: int = 120,
        shutdown_grace_period_s: int = 5,
        log_level: str = "warn",
        extra_args: Sequence[str] = (),
        log_path: str | Path | None = None,
        python: str = sys.executable,
        env: Mapping[str, str] | None = None,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        """``log_path``: append the router's stdout/stderr there (else it inherits ours). ``preexec_fn``: run in
        the child before exec (e.g. to set PR_SET_PDEATHSIG, see actors.processes)."""
        self.host = host
        self.port = port
        self.prometheus_port = prometheus_port
        self.worker_urls = list(worker_urls)
        self.policy = policy
        self.health_check_interval_s = health_check_interval_s
        self.health_failure_threshold = health_failure_threshold
        self.worker_startup_timeout_s = worker_startup_timeout_s
        self.shutdown_grace_period_s = shutdown_grace_period_s
        self.log_level = log_level
        self.extra_args = list(extra_args)
        self.log_path = Path(log_path) if log_path is not None else None
        self.python = python
        self.env = dict(env) if env is not None else None
        self.preexec_fn = preexec_fn
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: BinaryIO | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        """The Prometheus port's ``/metrics`` (``smg_*`` series)."""
        return f"http://{self.host}:{self.prometheus_port}/metrics"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def argv(self) -> list[str]:
        """The command line that starts this router."""
        argv = [
            self.python, "-m", "sglang_router.launch_router",
            "--host", self.host,
            "--port", str(self.port),
            "--prometheus-host", self.host,
            "--prometheus-port", str(self.prometheus_port),
            "--policy", self.policy,
            "--health-check-interval-secs", str(self.health_check_interval_s),
            "--health-failure-threshold", str(self.health_failure_threshold),
            "--worker-startup-timeout-secs", str(self.worker_startup_timeout_s),
            "--worker-startup-check-interval", "1",
            "--shutdown-grace-period-secs", str(self.shutdown_grace_period_s),
            "--log-level", self.log_level,
        ]  # fmt: skip
        if self.worker_urls:
            argv += ["--worker-urls", *self.worker_urls]
        return argv + self.extra_args

    def start(self, timeout_s: float = 60.0, *, wait: bool = True) -> None:
        """Start the router and wait until it answers and every initial worker is healthy.

        ``wait=False``: return once the process is started; call :meth:`wait_ready` later.
        """
        if self._proc is not None:
            raise RouterError(f"router {self.url} was already started (pid {self._proc.pid})")
        deadline = time.monotonic() + timeout_s
        output: BinaryIO | None = None
        if self.log_path is not None:
            self._log_file = output = self.log_path.open("ab")
        env = {**os.environ, **self.env} if self.env is not None else None
        self._proc = subprocess.Popen(
            self.argv(),
            stdout=output,
            stderr=output,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
            preexec_fn=self.preexec_fn,
        )
        logger.info("started sglang-router pid %d on %s", self._proc.pid, self.url)
        if not wait:
            return
        try:
            self.wait_ready(timeout_s=max(0.0, deadline - time.monotonic()))
            for url in self.worker_urls:
                self.wait_worker_healthy(url, timeout_s=max(0.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Wait until ``GET /liveness`` answers 200 (it does once the HTTP server is up); fail at once if the process
        exits."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_alive()
            try:
                status, _ = self._call("GET", "/liveness", timeout_s=2.0)
                if status == 200:
                    return
            except RouterError:
                pass
            if time.monotonic() >= deadline:
                raise RouterError(f"router {self.url} did not become ready within {timeout_s:.0f}s{self._log_tail()}")
            time.sleep(POLL_S)

    def list_workers(self, timeout_s: float = 5.0) -> list[dict[str, Any]]:
        """The router's workers, each with at least ``id``, ``url`` and ``is_healthy``."""
        status, body = self._call("GET", "/workers", timeout_s=timeout_s)
        if status != 200 or not isinstance(body, dict):
            raise RouterError(f"router {self.url}: GET /workers answered {status}: {body!r}")
        return list(body.get("workers", []))

    def find_worker(self, url: str) -> dict[str, Any] | None:
        """The router's record of the worker at ``url``, or None."""
        return next((w for w in self.list_workers() if w.get("url") == url.rstrip("/")), None)

    def add_worker(self, url: str, *, timeout_s: float = 30.0, wait_healthy: bool = True) -> str:
        """Register a worker; returns its ``worker_id`` once listed (and healthy, unless told not to wait).

        The worker must serve ``GET /health`` and is probed on ``/server_info`` and ``/model_info``. ``POST /workers
        {"url"}`` answers 202 with a ``worker_id`` and registers it in the background."""
        deadline = time.monotonic() + timeout_s
        status, body = self._call("POST", "/workers", {"url": url}, timeout_s=timeout_s)
        if status not in (200, 201, 202) or not isinstance(body, dict) or "worker_id" not in body:
            raise RouterError(f"router {self.url}: adding worker {url} answered {status}: {body!r}")
        worker_id = str(body["worker_id"])
        if wait_healthy:
            try:
                self.wait_worker_healthy(url, timeout_s=max(0.0, deadline - time.monotonic()))
            except RouterError as exc:
                # 0.3.2 retries a pending add until --worker-startup-timeout-secs; DELETE cannot cancel it.
                _, job = self._call("GET", f"/workers/{worker_id}", timeout_s=2.0)
                status = job.get("job_status") if isinstance(job, dict) else job
                raise RouterError(f"{exc}; router job for {worker_id}: {status}") from exc
        logger.info("router %s: added worker %s as %s", self.url, url, worker_id)
        return worker_id

    def wait_worker_healthy(self, url: str, timeout_s: float = 30.0) -> str:
        """Wait until the worker at ``url`` is listed as healthy; returns its id."""
        return self._wait_worker(url, lambda w: w is not None and bool(w.get("is_healthy")), "healthy", timeout_s)

    def wait_worker_unhealthy(self, url: str, timeout_s: float = 30.0) -> None:
        """Wait until the worker at ``url`` is listed as unhealthy (or gone)."""
        self._wait_worker(url, lambda w: w is None or not w.get("is_healthy"), "unhealthy", timeout_s)

    def remove_worker(self, worker_id: str, *, timeout_s: float = 30.0) -> None:
        """Deregister a worker by id and wait until it is no longer listed (``DELETE /workers/{id}`` answers at once
        and removes it in the background)."""
        deadline = time.monotonic() + timeout_s
        status, body = self._call("DELETE", f"/workers/{worker_id}", timeout_s=timeout_s)
        if status not in (200, 202, 204):
            raise RouterError(f"router {self.url}: removing worker {worker_id} answered {status}: {body!r}")
        while any(w.get("id") == worker_id for w in self.list_workers()):
            if time.monotonic() >= deadline:
                raise RouterError(f"router {self.url}: worker {worker_id} still listed after {timeout_s:.0f}s")
            time.sleep(POLL_S)
        logger.info("router %s: removed worker %s", self.url, worker_id)

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM the router's process group, wait up to ``timeout_s``, then SIGKILL; the exit code."""
        proc, self._proc = self._proc, None
        code: int | None = None
        if proc is not None:
            code = terminate_group(proc, timeout_s)
            logger.info("sglang-router pid %d on %s stopped (exit code %s)", proc.pid, self.url, code)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return code

    def __enter__(self) -> RouterProcess:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _wait_worker(self, url: str, done: Callable[[dict[str, Any] | None], bool], what: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_alive()
            worker = self.find_worker(url)
            if done(worker):
                return str(worker["id"]) if worker else ""
            if time.monotonic() >= deadline:
                raise RouterError(
                    f"router {self.url}: worker {url} not {what} within {timeout_s:.0f}s (last seen: {worker})"
                )
            time.sleep(POLL_S)

    def _check_alive(self) -> None:
        if self._proc is None:
            raise RouterError(f"router {self.url} is not started")
        code = self._proc.poll()
        if code is not None:
            raise RouterError(f"router {self.url} (pid {self._proc.pid}) exited with code {code}{self._log_tail()}")

    def _call(self, method: str, path: str, body: Any = None, *, timeout_s: float) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=max(0.1, timeout_s)) as response:
                return response.status, _decode(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _decode(exc.read())
        except (urllib.error.URLError, OSError) as exc:
            raise RouterError(f"router {self.url}: {method} {path} failed: {exc}") from exc

    def _log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return f"; last log lines ({self.log_path}):\n" + "\n".join(tail)


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw.strip() else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return raw.decode(errors="replace")
