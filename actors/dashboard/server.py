"""The dashboard's HTTP server (stdlib ``http.server``, threaded): the page, its static files, the JSON API.

What ``miles-dashboard RUN_DIR`` runs: a browser shows a run's records without any service beyond the stdlib.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from actors.dashboard.api import answer
from actors.dashboard.run_store import RunStore

logger = logging.getLogger(__name__)

MAX_URL = 2048  # a longer URL is a 414
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}  # fmt: skip
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; object-src 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
    "Referrer-Policy": "no-referrer",
}


def static_files() -> dict[str, bytes]:
    """The package's static files by name (read once, from the installed package)."""
    folder = resources.files("actors.dashboard").joinpath("static")
    return {entry.name: entry.read_bytes() for entry in folder.iterdir() if entry.name.rsplit(".", 1)[-1] in
            ("html", "js", "css", "svg")}  # fmt: skip


class DashboardServer:
    """Serves one run directory until ``close()``: ``/`` (the page), ``/static/NAME`` and ``/api/...`` (:mod:`.api`,
    reading ``run_dir`` only). GET and HEAD only; request lines and headers are bounded by ``http.server``."""

    def __init__(self, run_dir: Path, *, host: str = "127.0.0.1", port: int = 0) -> None:
        run_dir = Path(run_dir).expanduser().resolve()
        if not run_dir.is_dir():
            raise FileNotFoundError(f"run directory {run_dir} does not exist (give the collector's run_dir)")
        self.store = RunStore(run_dir)
        self.files = static_files()
        handler = functools.partial(_Handler, dashboard=self)  # as http.server's own directory= (stdlib docs)
        self._http = ThreadingHTTPServer((host, port), handler)
        self._http.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        return f"http://{shown}:{port}/"

    def start(self) -> DashboardServer:
        """Serve from a daemon thread; returns self."""
        serve = self._http.serve_forever
        self._thread = threading.Thread(target=serve, args=(0.05,), name="dashboard-http", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._http.serve_forever()

    def close(self) -> None:
        self._http.shutdown() if self._thread is not None else None
        self._http.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


class _Handler(BaseHTTPRequestHandler):
    server_version = "miles-dashboard"
    sys_version = ""

    def __init__(self, *args: Any, dashboard: DashboardServer, **kwargs: Any) -> None:
        self.dashboard = dashboard  # before the base __init__, which handles the request at once
        super().__init__(*args, **kwargs)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, *, body: bool) -> None:
        if len(self.path) > MAX_URL:
            self._json(HTTPStatus.REQUEST_URI_TOO_LONG, {"error": f"URL longer than {MAX_URL} bytes"}, body)
            return
        url = urlsplit(self.path)
        try:
            if url.path.startswith("/api/"):
                status, payload = answer(self.dashboard.store, url.path, url.query)
                self._json(status, payload, body)
            elif url.path in ("/", "/index.html"):
                self._file("index.html", body)
            # Only the files shipped in this package's static/ folder, looked up by exact name: no path from a
            # request ever reaches the filesystem.
            elif url.path.startswith("/static/"):
                self._file(url.path.removeprefix("/static/"), body)
            else:
                self._json(HTTPStatus.NOT_FOUND, {"error": f"no page {url.path[:80]!r}: open / or /api/run"}, body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:  # a bug, never a data problem (those are 4xx or messages in the data): a JSON 500
            logger.exception("dashboard: %s failed", url.path[:80])
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"[:300]}, body)

    def _file(self, name: str, body: bool) -> None:
        content = self.dashboard.files.get(name)
        if content is None:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no static file {name[:80]!r}"}, body)
            return
        self._send(HTTPStatus.OK, CONTENT_TYPES["." + name.rsplit(".", 1)[-1]], content, body)

    def _json(self, status: int, payload: dict[str, Any], body: bool) -> None:
        data = json.dumps(payload, allow_nan=False, default=str).encode()
        self._send(status, "application/json", data, body)

    def _send(self, status: int, content_type: str, data: bytes, body: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in SECURITY_HEADERS.items():
            self.send_header(key, value)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("dashboard %s: " + format, self.address_string(), *args)
