"""Launch failures a new user meets first, each said once, on one line, with its fix: a host Python without
miles-actors, an SSH port that does not speak SSH (paramiko's traceback goes to the launcher's log file), a job
module that raises while it is imported."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import toml_text
from launch_helpers import PYTHON, subprocess_env

pytestmark = pytest.mark.processes

SYSTEM_PYTHON = "/usr/bin/python3"


def launch(config: Path) -> subprocess.CompletedProcess[str]:
    argv = [PYTHON, "-m", "launcher.console.cli", str(config)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90, env=subprocess_env(), cwd="/")


def write(tmp_path: Path, host: dict, job: str = "userjob:main") -> Path:
    (tmp_path / "userjob.py").write_text("def main(ctx):\n    return 0\n\n\nclass Actor:\n    pass\n")
    data = {
        "launcher": {"workdir": str(tmp_path / "run")},
        "hosts": [{"name": "h", "workdir": str(tmp_path / "h"), **host}],
        "job": {"entrypoint": job},
        "pools": [{"id": "p", "worker": {"kind": "serve", "actor_class": "userjob:Actor"}}],
    }
    path = tmp_path / "hosts.toml"
    path.write_text(toml_text.dump(data))
    return path


def test_a_python_without_miles_actors_is_named_once_with_the_fix(tmp_path: Path) -> None:
    probe = [SYSTEM_PYTHON, "-c", "import launcher"]
    if subprocess.run(probe, capture_output=True, cwd="/", env={"PATH": "/usr/bin:/bin"}).returncode == 0:
        pytest.skip(f"{SYSTEM_PYTHON} has miles-actors installed")
    host = {"address": "localhost", "provider": "local", "python": SYSTEM_PYTHON, "env": {"PYTHONPATH": ""}}
    config = write(tmp_path, host)
    result = launch(config)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line or "WARNING" in line]
    assert errors == [
        f"[miles-launch] error: miles-actors is not installed in {SYSTEM_PYTHON} on host 'h': install it there "
        f"(`{SYSTEM_PYTHON} -m pip install miles-actors==0.1.0`), or set hosts.toml `python` for this host to a "
        "Python that has it"
    ]
    assert "No module named 'launcher'" not in result.stderr


@pytest.fixture
def not_ssh() -> Iterator[int]:
    """A TCP port that answers like a web server, not an SSH server."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    server.close()


def test_an_ssh_handshake_failure_is_one_line_and_the_traceback_goes_to_the_log(tmp_path: Path, not_ssh: int) -> None:
    config = write(tmp_path, {"address": "127.0.0.1", "ssh": {"port": not_ssh}})
    result = launch(config)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "paramiko" not in result.stderr.replace("paramiko's", "")
    (error,) = [line for line in result.stderr.splitlines() if "error:" in line]
    assert f"host 'h' (root@127.0.0.1:{not_ssh}): SSH handshake failed" in error
    assert (
        f"is an SSH server listening on that port? (paramiko's traceback: {tmp_path / 'run' / 'launcher.log'})" in error
    )
    assert "Traceback" in (tmp_path / "run" / "launcher.log").read_text()


def test_a_job_module_that_raises_at_import_is_a_launcher_error_line(tmp_path: Path) -> None:
    config = write(tmp_path, {"address": "localhost", "provider": "local"})
    (tmp_path / "userjob.py").write_text("import os\n\nos.environ['MUST_BE_SET']\n")
    result = launch(config)
    assert result.returncode == 2, result.stderr
    assert "[miles-launch] error:" in result.stderr and "Traceback" not in result.stderr
    assert "importing userjob raised KeyError: 'MUST_BE_SET'" in result.stderr
    assert f'File "{tmp_path / "userjob.py"}", line 3, in <module>' in result.stderr
