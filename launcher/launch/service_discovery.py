"""Prometheus service discovery for a job: an HTTP SD endpoint and a file_sd JSON file listing every target.

One scrape config then covers the whole job, however its workers come and go (README.md, "Prometheus", shows it).
"""

from __future__ import annotations

import http.server
import json
import logging
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_ADDRESS = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[^\s:/\[\]]+):(\d{1,5})$")


def _check_address(address: str) -> str:
    match = _ADDRESS.match(address) if isinstance(address, str) else None
    if match is None or not 0 < int(match.group(2)) < 65536:
        raise ValueError(f"scrape target {address!r} must be 'host:port' (IPv6 as '[addr]:port'), port 1..65535")
    return address


def _check_labels(address: str, labels: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(labels, Mapping):
        raise TypeError(f"labels of target {address} must be a mapping of str to str, got {type(labels).__name__}")
    checked: dict[str, str] = {}
    for name, value in labels.items():
        if not isinstance(name, str) or not _LABEL_NAME.match(name) or name.startswith("__"):
            raise ValueError(
                f"label name {name!r} of target {address} is not a Prometheus label name "
                "([a-zA-Z_][a-zA-Z0-9_]*, not starting with '__')"
            )
        if not isinstance(value, str):
            raise TypeError(f"label {name!r} of target {address} must be a str, got {type(value).__name__}")
        checked[name] = value
    return checked


class ServiceDiscovery:
    """Serves the current scrape targets over HTTP (``url``) and mirrors them into ``file_path``, if given.

    Thread-safe: the launcher's threads add and remove targets while Prometheus reads. Each request is answered
    from a body prepared at the last change; a slow client is cut off after ``request_timeout_s``."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        file_path: str | os.PathLike[str] | None = None,
        path: str = "/targets",
        request_timeout_s: float = 5.0,
    ) -> None:
        if not isinstance(port, int) or not 0 <= port < 65536:
            raise ValueError(f"service discovery port must be in 0..65535 (0: any free port), got {port!r}")
        if not path.startswith("/"):
            raise ValueError(f"service discovery path must start with '/', got {path!r}")
        self.file_path = Path(file_path) if file_path is not None else None
        self.path = path
        self._lock = threading.Lock()
        self._targets: dict[str, dict[str, str]] = {}
        self._body = b"[]"
        self.version = 0  # bumped on every change
        self.requests = 0  # requests answered
        self._server = _Server((host, port), _handler_for(self, request_timeout_s))
        self.host, self.port = host, self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name="service-discovery", daemon=True
        )
        self._write_file()
        self._thread.start()
        log.info("service discovery on %s", self.url)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.path}"

    def __enter__(self) -> ServiceDiscovery:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- targets -------------------------------------------------------------------------------------------

    def set_targets(self, targets: Mapping[str, Mapping[str, str]]) -> None:
        """Replace every target: ``{"host:port": {label: value}}``."""
        checked = {_check_address(address): _check_labels(address, labels) for address, labels in targets.items()}
        with self._lock:
            self._targets = checked
            self._publish()

    def add(self, address: str, labels: Mapping[str, str] | None = None) -> None:
        """Add or update one target."""
        checked = _check_labels(_check_address(address), labels or {})
        with self._lock:
            if self._targets.get(address) == checked:
                return
            self._targets[address] = checked
            self._publish()

    def remove(self, address: str) -> bool:
        """Drop one target; returns whether it was there."""
        with self._lock:
            if self._targets.pop(address, None) is None:
                return False
            self._publish()
            return True

    def targets(self) -> dict[str, dict[str, str]]:
        """A copy of the current targets."""
        with self._lock:
            return {address: dict(labels) for address, labels in self._targets.items()}

    def body(self) -> bytes:
        """The JSON served now."""
        with self._lock:
            return self._body

    def _publish(self) -> None:
        """Rebuild the body and rewrite the file (with the lock held, so changes land in order)."""
        # What Prometheus (2.28 or later) reads from ``http_sd_configs`` and ``file_sd_configs``: a JSON list of
        # target groups, one per target, e.g. ``[{"targets": ["10.0.0.5:9102"], "labels": {"pool": "rollout",
        # "cell": "rollout-0", "worker": "rollout-0-0", "host": "node5"}}]``.
        groups = [{"targets": [address], "labels": labels} for address, labels in sorted(self._targets.items())]
        self._body = json.dumps(groups, indent=1).encode()
        self.version += 1
        self._write_file()

    def _write_file(self) -> None:
        if self.file_path is None:
            return
        self.file_path.parent.mkdir(parents=True, exist_ok=True)
        # Replaced atomically on every change: Prometheus never reads half a file.
        tmp = self.file_path.with_name(f".{self.file_path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as handle:
            handle.write(self._body)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.file_path)

    # ---- lifecycle -----------------------------------------------------------------------------------------

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop serving (waits at most ``timeout_s``); the file stays with the last targets."""
        stopper = threading.Thread(target=self._server.shutdown, name="service-discovery-stop", daemon=True)
        stopper.start()
        stopper.join(timeout_s)
        self._server.server_close()
        self._thread.join(max(0.0, timeout_s))
        if self._thread.is_alive():
            log.warning("service discovery server did not stop within %.1f s", timeout_s)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def _handler_for(discovery: ServiceDiscovery, timeout_s: float) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = timeout_s  # a socket timeout per request: a stalled client cannot hold a thread

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in (discovery.path, "/"):
                self.send_error(404, f"service discovery is served at {discovery.path}")
                return
            body = discovery.body()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            with discovery._lock:
                discovery.requests += 1

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("service discovery %s: " + format, self.client_address[0], *args)

    return Handler
