"""The dashboard's HTTP server: the JSON API on a run directory, hostile inputs, and the miles-dashboard CLI.

miles' dashboard (radixark/miles miles/dashboard/server.py, ``_translate_errors``) maps a missing step or sample to
404 and a bad argument to 400, and its PRs #2817, #2815 and #2881 fixed pages that failed with a 500 on an empty
step, a missing step and a malformed line: here each gets a clear message, never a 500. Request inputs are
hostile: numbers bounded, query parameters known, no path from a request reaches the filesystem.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from dashboard_fixtures import ROOT, write_run

from actors.dashboard.records import encode_line
from actors.dashboard.server import DashboardServer


@pytest.fixture
def server(tmp_path: Path) -> Iterator[DashboardServer]:
    run = write_run(tmp_path / "run", {1: [0.0, 1.0, 0.5], 2: [0.25]})
    (run / "steps.jsonl").open("ab").write(encode_line({"step": 3, "source": "rollout", "rollout_s": 0.1}))
    (run / "secret.txt").write_text("not served")
    dashboard = DashboardServer(run).start()
    yield dashboard
    dashboard.close()


def get(server: DashboardServer, path: str, method: str = "GET") -> tuple[int, dict, bytes]:
    """``path`` sent exactly as given (no client-side normalisation)."""
    host, port = server._http.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=10)
    connection.putrequest(method, path, skip_accept_encoding=True)
    connection.endheaders()
    response = connection.getresponse()
    body = response.read()
    connection.close()
    parsed = json.loads(body) if response.getheader("Content-Type") == "application/json" and body else {}
    return response.status, parsed, body


def test_steps_step_and_sample(server: DashboardServer) -> None:
    status, body, _ = get(server, "/api/steps")
    assert status == 200 and [s["step"] for s in body["steps"]] == [1, 2, 3]
    assert body["steps"][0]["reward_mean"] == 0.5 and body["steps"][0]["loss"] == pytest.approx(0.1)
    status, body, _ = get(server, "/api/steps/1?sort=reward&order=desc")
    assert status == 200 and [s["reward"] for s in body["sample_list"]] == [1.0, 0.5, 0.0]
    status, body, _ = get(server, "/api/steps/1?sort=index")
    assert [s["sample_index"] for s in body["sample_list"]] == [0, 1, 2]
    status, body, _ = get(server, "/api/steps/1/samples/1?occurrence=0")
    assert status == 200 and body["sample"]["reward"] == 1.0 and body["sample"]["token_texts"][0] == "<256>"
    status, body, _ = get(server, "/api/run")
    assert body["steps"] == [1, 2, 3] and body["problems"]["count"] == 0


def test_empty_and_missing_steps_say_so(server: DashboardServer) -> None:
    status, body, _ = get(server, "/api/steps/3")
    assert status == 200 and body["sample_list"] == []
    assert body["note"] == "step 3 recorded no samples (its metrics are shown)"
    status, body, _ = get(server, "/api/steps/7")
    assert status == 404 and body["error"] == "step 7 is not in this run (steps recorded: 1..3)"
    status, body, _ = get(server, "/api/steps/2/samples/5")
    assert status == 404 and "step 2 has no sample 5 (occurrence 0); it has 1 samples" in body["error"]
    status, body, _ = get(server, "/api/steps/7/samples/0")
    assert status == 404 and "step 7 is not in this run" in body["error"]


@pytest.mark.parametrize("path, fragment", [
    ("/api/steps/-1", "step must be an integer from 0 to 999999999, got '-1'"),
    ("/api/steps/1e9", "got '1e9'"),
    ("/api/steps/99999999999999999999", "got '99999999999999999999'"),
    ("/api/steps/1?sort=__proto__", "sort must be one of index, reward"),
    ("/api/steps/1?order=up", "order must be one of asc, desc"),
    ("/api/steps/1?sort=reward&sort=index", "each query parameter may be given once"),
    ("/api/steps/1?evil=1", "unknown query parameter 'evil'"),
    ("/api/steps/1/samples/0?occurrence=x", "occurrence must be an integer"),
    ("/api/steps/1?" + "a=1&" * 200, "query string longer than 512"),
    ("/api/steps/1?%zz", "malformed query string"),
])  # fmt: skip
def test_bad_inputs_are_400_with_the_reason(server: DashboardServer, path: str, fragment: str) -> None:
    status, body, _ = get(server, path)
    assert status == 400 and fragment in body["error"], body


@pytest.mark.parametrize("path", ["/static/../secret.txt", "/static/..%2fsecret.txt", "/static/%2e%2e/secret.txt",
                                  "/secret.txt", "/static//etc/passwd", "/static/", "/api/../secret.txt",
                                  "/static/server.py", "/api/steps/1/../../secret.txt"])  # fmt: skip
def test_paths_never_leave_the_package_or_the_run(server: DashboardServer, path: str) -> None:
    status, _, raw = get(server, path)
    assert status in (400, 404) and b"not served" not in raw and b"import" not in raw, (status, raw[:200])


def test_page_and_static_files_come_from_the_package(server: DashboardServer) -> None:
    status, _, raw = get(server, "/")
    assert status == 200 and b'<script src="/static/app.js">' in raw and b"http" not in raw.split(b"<body>")[1]
    for name in ("app.js", "views.js", "charts.js", "style.css"):
        status, _, raw = get(server, f"/static/{name}")
        assert status == 200 and raw == (ROOT / "actors/dashboard/static" / name).read_bytes()
    status, _, raw = get(server, "/", method="HEAD")
    assert status == 200 and raw == b""
    status, _, _ = get(server, "/api/steps", method="POST")
    assert status == 501
    status, body, _ = get(server, "/api/steps/1" + "x" * 3000)
    assert status == 414 and "URL longer than 2048" in body["error"]


def test_malformed_and_torn_lines_are_reported_not_fatal(server: DashboardServer) -> None:
    run = server.store.run_dir
    with (run / "samples.jsonl").open("ab") as handle:
        handle.write(b"{oops\n" + encode_line({"step": 2, "sample_index": 1, "reward": 0.9})[:-9])
    status, body, _ = get(server, "/api/run")
    assert status == 200 and body["problems"]["count"] == 1
    assert body["problems"]["lines"][0]["line"] == 5 and body["problems"]["incomplete_last_line"]
    status, body, _ = get(server, "/api/steps/2")
    assert status == 200 and len(body["sample_list"]) == 1  # the torn line is not a sample


@pytest.mark.processes
def test_cli_serves_and_rejects_a_missing_directory(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", {1: [1.0]})
    missing = subprocess.run([sys.executable, "-m", "actors.dashboard", str(tmp_path / "nope")],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert missing.returncode == 2 and "the directory does not exist" in missing.stderr, missing.stderr
    assert "[dashboard] enabled = true" in missing.stderr and missing.stderr.count(str(tmp_path / "nope")) == 1
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "actors.dashboard", str(run), "--port", str(port)],
                               stdout=subprocess.PIPE, text=True, cwd=ROOT)  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(f"miles-dashboard: http://127.0.0.1:{port}/"), line
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", "/api/steps")
        assert json.loads(connection.getresponse().read())["steps"][0]["reward_mean"] == 1.0
        connection.close()
    finally:
        process.terminate()
        process.wait(timeout=10)
