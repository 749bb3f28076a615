"""Helpers shared by launcher tests: paths, subprocess env, hosts.toml entries, the netns cluster model."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import toml_text
from sshd_fixture import Sshd, SshKeys

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
NETNS_SH = HERE / "netns.sh"
NETNS_OCTET = "77"


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for launcher/agent subprocesses: test helpers importable (launch_jobs, launch_workers)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def local_host(name: str, workdir: Path, **fields: Any) -> dict[str, Any]:
    """A [[hosts]] entry for the local provider."""
    return {
        "name": name,
        "address": "localhost",
        "provider": "local",
        "python": PYTHON,
        "workdir": str(workdir),
        "env": {"PYTHONPATH": str(HERE)},
        **fields,
    }


def ssh_host(name: str, address: str, port: int, keys: SshKeys, workdir: Path, **fields: Any) -> dict[str, Any]:
    """A [[hosts]] entry reached over SSH with the test client key."""
    return {
        "name": name,
        "address": address,
        "provider": "ssh",
        "python": PYTHON,
        "workdir": str(workdir),
        "env": {"PYTHONPATH": str(HERE)},
        "ssh": {
            "user": "root" if os.geteuid() == 0 else os.environ.get("USER", "root"),
            "port": port,
            "key_file": str(keys.client_key),
        },
        **fields,
    }


@dataclass
class NetnsCluster:
    """Two hosts in their own network namespaces on a bridge; the launcher runs in the switch namespace."""

    tag: str
    switch: str
    hosts: list[tuple[str, str, str]]  # (name, namespace, address)
    sshds: list[Sshd] = field(default_factory=list)

    def exec_argv(self, namespace: str | None = None) -> list[str]:
        """Prefix to run a command inside a namespace (the switch namespace by default)."""
        return ["ip", "netns", "exec", namespace or self.switch]

    def pids(self, namespace: str) -> set[int]:
        """Every pid inside a namespace."""
        out = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, check=True)
        return {int(x) for x in out.stdout.split()}

    def stray_pids(self) -> dict[str, set[int]]:
        """Pids in each host namespace other than its sshd listener."""
        listeners = {s.pid for s in self.sshds}
        return {ns: self.pids(ns) - listeners for _, ns, _ in self.hosts}

    def assert_no_strays(self, timeout_s: float = 10.0) -> None:
        """Every host namespace holds only its sshd listener within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while any(self.stray_pids().values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert self.stray_pids() == {ns: set() for _, ns, _ in self.hosts}, "processes left on a host"


def write_hosts_toml(
    tmp_path: Path,
    hosts: list[dict[str, Any]],
    pools: list[dict[str, Any]],
    job: str = "launch_jobs:exit_code",
    **launcher: Any,
) -> Path:
    """Write a hosts.toml (launcher workdir ``tmp_path/run``, short grace) and return its path."""
    data = {
        "launcher": {"workdir": str(tmp_path / "run"), "stop_grace_s": 2, "connect_timeout_s": 5, **launcher},
        "hosts": hosts,
        "job": {"entrypoint": job},
        "pools": pools,
    }
    path = tmp_path / "hosts.toml"
    path.write_text(toml_text.dump(data))
    return path


def wait_for(what: str, probe: Any, timeout_s: float, interval_s: float = 0.1) -> Any:
    """``probe()``'s first truthy value, polled until ``timeout_s``; AssertionError naming ``what`` after.
    With ``MILES_TEST_TIMING=1`` (and ``pytest -s``) prints how long each wait took."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            if os.environ.get("MILES_TEST_TIMING"):
                print(f"[{time.monotonic() - deadline + timeout_s:6.2f}s] {what}", file=sys.stderr)
            return last
        time.sleep(interval_s)
    raise AssertionError(f"{what} within {timeout_s}s (last: {last!r})")


def launch_until_job_runs(argv: list[str], marker: Path, *, timeout_s: float = 60.0) -> subprocess.Popen[bytes]:
    """Start a launcher (``argv``) whose job writes ``marker`` when it runs; return it once the job runs.

    Fails the test, with the launcher's stderr, if it exits first or the job does not start within ``timeout_s``.
    """
    launcher = subprocess.Popen(
        argv, env=subprocess_env(MILES_TEST_MARKER=str(marker)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + timeout_s
    while not marker.exists():
        if launcher.poll() is not None:
            raise AssertionError(f"the launcher exited with {launcher.returncode}: {launcher.stderr.read().decode()}")
        if time.monotonic() > deadline:
            launcher.kill()
            launcher.wait(10)
            raise AssertionError(f"the launcher never started the job within {timeout_s} s")
        time.sleep(0.1)
    return launcher


def check_names_across(stdout: str, hosts: list[str]) -> dict[str, Any]:
    """Assert what ``launch_jobs:names_across`` printed: one name, one actor, on every host of the launch."""
    out = json.loads(stdout.split("NAMES ", 1)[1].splitlines()[0])
    assert out["hosts"] == hosts
    child = out["child"]
    assert child["host"] == hosts[0]
    assert out["b_adds"] == 5  # found from the other host, and called there
    assert f"actor name 'shared' is taken by a live actor at {child['endpoint']}" in out["taken"]
    assert out["if_exists"]["endpoint"] == child["endpoint"] and out["if_exists"]["pid"] == child["pid"]
    assert out["blue"]["host"] == hosts[-1] and out["blue"]["endpoint"] != child["endpoint"]
    assert out["a_blue"] == 1 and out["a_default"] == 6  # the same name in two namespaces: two actors
    assert out["green"].startswith("runtime.core.errors.ActorNotFound: no actor named 'shared' in namespace 'green'")
    assert out["launcher"] == 6
    assert out["killed_pid"] == child["pid"]
    assert out["again"]["host"] == hosts[-1] and out["again"]["endpoint"] != child["endpoint"]
    assert out["a_after"] == 0  # the host of the dead holder now reaches the new one by the name
    return out


def run_local_example(
    data: dict[str, Any], tmp_path: Path, cwd: Path, *, on_line: Callable[[str, int], None] | None = None
) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run an example hosts.toml (parsed as ``data``) on this machine: its workdirs under ``tmp_path``, this
    interpreter on its one host; ``on_line(line, launcher_pid)`` sees each console line as it comes; returns the
    finished launcher (stderr merged into stdout) and that output."""
    data["launcher"]["workdir"] = str(tmp_path / "launch")
    data["host_defaults"]["python"] = sys.executable
    data["hosts"][0]["workdir"] = str(tmp_path / "host")
    config = tmp_path / "hosts.toml"
    config.write_text(toml_text.dump(data))
    argv = [PYTHON, "-m", "launcher.console.cli", str(config), "--no-logs"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
                          env=subprocess_env()) as launcher:  # fmt: skip
        timer = threading.Timer(300, launcher.kill)  # the deadline of the whole run
        timer.start()
        lines = []
        try:
            assert launcher.stdout is not None
            for line in launcher.stdout:
                lines.append(line)
                if on_line is not None:
                    on_line(line, launcher.pid)
            launcher.wait(timeout=30)
        finally:
            timer.cancel()
            if launcher.poll() is None:
                launcher.kill()
                launcher.wait(timeout=30)
    output = "".join(lines)
    return subprocess.CompletedProcess(argv, launcher.returncode, output, ""), output


def result_line(stdout: str) -> dict[str, Any]:
    """The JSON of a job's last ``RESULT {json}`` line."""
    return json.loads(stdout.rsplit("RESULT ", 1)[1].splitlines()[0])


@contextlib.contextmanager
def launched_here(path: Path) -> Iterator[Any]:
    """A launch of the hosts.toml at ``path`` served by this process (its WorkerProvider, every cell started), with
    this process holding the launch's keys as miles-launch's entrypoint job does; torn down, and the environment
    restored, on exit."""
    from launcher.config.hosts_config import load_config
    from launcher.launch.worker_provider import WorkerProvider
    from transport.security import CURVE_DIR_ENV

    previous = os.environ.get(CURVE_DIR_ENV)
    with WorkerProvider(load_config(path)) as provider:
        provider.start_all(deadline_s=60)
        os.environ[CURVE_DIR_ENV] = provider.curve_dir or ""
        try:
            yield provider
        finally:
            os.environ.pop(CURVE_DIR_ENV) if previous is None else os.environ.__setitem__(CURVE_DIR_ENV, previous)
