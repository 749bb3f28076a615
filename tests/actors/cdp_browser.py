"""Debian's chromium, headless, driven over the Chrome DevTools Protocol (websockets; no downloaded browser).

::

    with Chromium.start(tmp_path) as browser:
        browser.navigate("http://127.0.0.1:8265/")
        browser.wait_for("document.querySelectorAll('#steps tr').length > 1")
        rows = browser.evaluate("[...document.querySelectorAll('#steps tr')].length")
        browser.screenshot(tmp_path / "steps.png")

The browser is started with its own profile directory and ``--remote-debugging-port=0``; its port comes from
the ``DevToolsActivePort`` file it writes. ``close()`` ends the process (and its children: it has its own
session) by pid, and waits for it.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--disable-component-update", "--disable-sync", "--remote-debugging-port=0"]  # fmt: skip


class Chromium:
    """One headless chromium and a CDP session on its first page."""

    def __init__(self, process: subprocess.Popen[bytes], socket: ClientConnection) -> None:
        self.process = process
        self.socket = socket
        self._ids = itertools.count(1)

    @classmethod
    def start(cls, profile: Path, *, deadline_s: float = 30.0) -> Chromium:
        profile.mkdir(parents=True, exist_ok=True)
        log = (profile / "chromium.log").open("wb")
        process = subprocess.Popen([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            port = _devtools_port(profile, process, deadline_s)
            pages = _json(f"http://127.0.0.1:{port}/json/list")
            page = next(target for target in pages if target.get("type") == "page")
            socket = connect(page["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024, open_timeout=deadline_s)
            socket.__enter__()  # websockets' sync client wants its context entered (closed in close())
        except BaseException:
            _stop(process)
            raise
        browser = cls(process, socket)
        browser.call("Page.enable")
        browser.call("Emulation.setDeviceMetricsOverride", width=1280, height=860, deviceScaleFactor=1, mobile=False)
        return browser

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.socket.close()
        _stop(self.process)

    def call(self, method: str, *, timeout_s: float = 30.0, **params: Any) -> dict[str, Any]:
        """Send one CDP command and return its result (events in between are skipped)."""
        call_id = next(self._ids)
        self.socket.send(json.dumps({"id": call_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            message = json.loads(self.socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"CDP {method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page (promises awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def wait_for(self, condition: str, *, deadline_s: float = 15.0) -> Any:
        """Poll the JavaScript ``condition`` until it is truthy; its value, or TimeoutError with the page's text."""
        deadline = time.monotonic() + deadline_s
        while True:
            with contextlib.suppress(RuntimeError):
                value = self.evaluate(condition)
                if value:
                    return value
            if time.monotonic() > deadline:
                text = self.evaluate("document.body ? document.body.innerText.slice(0, 2000) : ''")
                raise TimeoutError(f"the page never met {condition!r}; it shows:\n{text}")
            time.sleep(0.1)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path


def _devtools_port(profile: Path, process: subprocess.Popen[bytes], deadline_s: float) -> int:
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"chromium exited with {process.returncode}: {(profile / 'chromium.log').read_text()}")
        with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
            return int(marker.read_text().splitlines()[0])
        time.sleep(0.05)
    raise TimeoutError(f"chromium wrote no {marker} within {deadline_s}s")


def _json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End the browser's session (its own process group, made by start_new_session) and wait for it."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):  # helpers (zygote, renderers) left in its group
        os.killpg(process.pid, signal.SIGKILL)
