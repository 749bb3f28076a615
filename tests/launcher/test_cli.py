"""``miles-launch`` end to end with the local provider: dry run, run, exit codes, Ctrl-C, status/down, deaths."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import toml_text
from launch_helpers import PYTHON, check_names_across, local_host, subprocess_env

pytestmark = pytest.mark.processes

HTTP = {
    "kind": "command",
    "command": "{python} -m http.server {port} --bind 127.0.0.1",
    "ready": {"kind": "http", "port": "port", "path": "/", "deadline_s": 20},
}
COUNTER = {"kind": "serve", "actor_class": "launch_actors:Counter"}


def write(tmp_path: Path, job: dict[str, Any], pools: list[dict[str, Any]] | None = None) -> Path:
    data = {
        "launcher": {"workdir": str(tmp_path / "run"), "stop_grace_s": 2},
        "hosts": [local_host("n0", tmp_path / "n0", gpus=2), local_host("n1", tmp_path / "n1", gpus=2)],
        "job": job,
        "pools": pools if pools is not None else [{"id": "web", "cells": 2, "strategy": "SPREAD", "worker": HTTP}],
    }
    path = tmp_path / "hosts.toml"
    path.write_text(toml_text.dump(data))
    return path


def cli(*args: str, timeout: float = 90, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "launcher.console.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=subprocess_env(**env),
    )


def start(*args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, "-m", "launcher.console.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(**env),
    )


def wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return json.loads(path.read_text())


def test_dry_run_prints_plan(tmp_path: Path) -> None:
    result = cli(str(write(tmp_path, {"entrypoint": "launch_jobs:probe_http"})), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert re.search(r"(?m)^  web-0-0 +n0 ", result.stdout) and re.search(r"(?m)^  web-1-0 +n1 ", result.stdout)
    assert not (tmp_path / "n0" / "logs").exists()  # nothing started


def test_run_streams_prefixed_logs_and_returns_job_code(tmp_path: Path) -> None:
    result = cli(str(write(tmp_path, {"entrypoint": "launch_jobs:probe_http"})))
    assert result.returncode == 0, result.stderr
    assert "PROBE_RESULT" in result.stdout
    assert "(web-1-0 pid=" in result.stdout and "host=n1) Serving HTTP" in result.stdout
    assert "ready 2/2" in result.stderr and "teardown complete" in result.stderr
    assert not (tmp_path / "run" / "state.json").exists()
    result = cli(str(write(tmp_path, {"entrypoint": "launch_jobs:exit_code", "args": {"code": 7}})))
    assert result.returncode == 7


def test_command_job_gets_pool_addresses(tmp_path: Path) -> None:
    code = "import json, os; print('POOLS', json.loads(os.environ['MILES_LAUNCH_POOLS']))"
    result = cli(str(write(tmp_path, {"command": [PYTHON, "-c", code]})))
    assert result.returncode == 0, result.stderr
    assert "POOLS {'web': ['127.0.0.1:" in result.stdout


def test_errors_tear_down_and_exit_nonzero(tmp_path: Path) -> None:
    result = cli(str(write(tmp_path, {"entrypoint": "launch_jobs:fail"})))
    assert result.returncode == 1 and "job failed on purpose" in result.stderr
    assert "teardown complete" in result.stderr
    result = cli(str(write(tmp_path, {"entrypoint": "launch_jobs:no_such_function"})))
    assert result.returncode == 2 and "has no 'no_such_function'" in result.stderr
    bad = write(tmp_path, {"entrypoint": "launch_jobs:exit_code"}).read_text().replace("gpus = 2", "gpus = -1", 1)
    (tmp_path / "bad.toml").write_text(bad)
    result = cli(str(tmp_path / "bad.toml"))
    assert result.returncode == 2 and "host 'n0' field 'gpus'" in result.stderr
    too_big = [{"id": "big", "worker": {**COUNTER, "gpus": 3}}]
    result = cli(str(write(tmp_path, {"entrypoint": "launch_jobs:exit_code"}, too_big)))
    assert result.returncode == 2 and "pool 'big' cell 'big-0'" in result.stderr


def test_ctrl_c_tears_down(tmp_path: Path) -> None:
    marker = tmp_path / "marker.json"
    proc = start(str(write(tmp_path, {"entrypoint": "launch_jobs:wait_forever"})), MILES_TEST_MARKER=str(marker))
    info = wait_for(marker, proc)
    pids = [w["pid"] for w in info["workers"].values()]
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted; tearing down" in err and "teardown complete" in err
    assert not any(psutil.pid_exists(p) for p in pids)


def test_status_and_down(tmp_path: Path) -> None:
    marker = tmp_path / "marker.json"
    config = write(tmp_path, {"entrypoint": "launch_jobs:wait_forever"})
    proc = start(str(config), MILES_TEST_MARKER=str(marker))
    info = wait_for(marker, proc)
    status = cli("status", str(config), "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["running"] and report["launcher_pid"] == proc.pid
    assert report["hosts"]["n0"]["web-0-0"]["alive"] and report["hosts"]["n1"]["web-1-0"]["alive"]
    worker = report["hosts"]["n1"]["web-1-0"]
    assert (worker["pool"], worker["cell"], worker["state"], worker["restarts"]) == ("web", "web-1", "ready", 0)
    table = cli("status", str(config)).stdout.splitlines()
    head = rf"launcher pid {proc.pid}: running; running job for \d+m\d\ds \(launch up \d+m\d\ds\); "
    assert re.fullmatch(head + r"(job output \d+m\d\ds ago|no job output yet)", table[0]), table[0]
    assert table[1].split() == ["HOST", "POOL", "CELL", "WORKER", "PID", "STATE", "UPTIME", "RESTARTS", "LAST", "ERROR"]
    row = next(line.split() for line in table if "web-1-0" in line)
    assert row[:6] == ["n1", "web", "web-1", "web-1-0", str(info["workers"]["web-1-0"]["pid"]), "ready"]
    assert re.fullmatch(r"\d+m\d\ds", row[6]) and row[7:] == ["0", "-"]
    logs = cli("logs", str(config), "web-1", "-n", "5")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.startswith("==> web-1-0 on n1: ") and "Serving HTTP on 127.0.0.1" in logs.stdout
    down = cli("down", str(config))
    assert down.returncode == 0, down.stderr
    assert f"launcher pid {proc.pid} stopped" in down.stderr
    proc.communicate(timeout=30)
    assert not any(psutil.pid_exists(w["pid"]) for w in info["workers"].values())
    assert cli("status", str(config)).returncode == 3
    after = cli("logs", str(config), "web")  # the files outlive the launch; their paths follow from hosts.toml
    assert after.returncode == 0 and after.stdout.count("Serving HTTP") == 2 and "==> web-0-0 on n0" in after.stdout
    wrong = cli("logs", str(config), "webb")
    assert wrong.returncode == 2 and "no pool, cell or worker 'webb'" in wrong.stderr and "'web-1'" in wrong.stderr


def test_unknown_pool_raises_naming_the_pools(tmp_path: Path) -> None:
    result = cli(str(write(tmp_path, {"entrypoint": "launch_jobs:unknown_pool"})))
    assert result.returncode == 0, result.stderr
    assert "UNKNOWN_POOL UnknownPool: no pool 'no-such-pool' in " in result.stdout
    assert "its pools are ['web']" in result.stdout


def test_down_kills_leftovers_of_a_dead_launcher(tmp_path: Path) -> None:
    marker = tmp_path / "marker.json"
    config = write(tmp_path, {"entrypoint": "launch_jobs:wait_forever"})
    proc = start(str(config), MILES_TEST_MARKER=str(marker))
    wait_for(marker, proc)
    agents = psutil.Process(proc.pid).children()
    for agent in agents:  # simulate agents stuck: stop them so they cannot clean up, then lose the launcher
        agent.suspend()
    proc.kill()
    proc.communicate(timeout=10)
    assert [len(list((tmp_path / h).glob("curve-*"))) for h in ("n0", "n1")] == [1, 1]
    down = cli("down", str(config))
    assert down.returncode == 0, down.stderr
    assert "1/1 worker process(es) gone" in down.stderr
    for host in ("n0", "n1"):
        assert list((tmp_path / host).glob("curve-*")) == [], f"`down` left the CURVE keys on {host}"
    assert list((tmp_path / "run").glob("curve-*")) == [], "`down` left the dead launcher's CURVE keys"
    for agent in agents:
        agent.resume()


def test_worker_death_is_reported_by_the_cli(tmp_path: Path) -> None:
    marker = tmp_path / "marker.json"
    config = write(tmp_path, {"entrypoint": "launch_jobs:report_deaths"}, [{"id": "c", "cells": 2, "worker": COUNTER}])
    proc = start(str(config), MILES_TEST_MARKER=str(marker))
    pids = wait_for(marker, proc)
    psutil.Process(pids["c-1-0"]).kill()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "WORKER DIED: cell c-1 is not alive: worker c-1-0 on n0" in err
    seen = json.loads(out.split("DEATH_SEEN ", 1)[1].splitlines()[0])
    assert seen["alive"] == [True, False] and "killed by SIGKILL" in seen["report"]


def test_async_entrypoint_awaits_actor_calls(tmp_path: Path) -> None:
    pools = [{"id": "c", "cells": 2, "worker": {**COUNTER, "kwargs": {"start": 3}}}]
    result = cli(str(write(tmp_path, {"entrypoint": "launch_jobs:async_calls"}, pools)), "--no-logs")
    assert result.returncode == 0, result.stderr
    assert "ASYNC [4, 4]" in result.stdout


def test_ctrl_c_during_start_tears_down(tmp_path: Path) -> None:
    slow = {
        "kind": "command",
        "command": "{python} -m launch_workers sleep_forever",
        "ready": {"kind": "tcp", "port": "port", "deadline_s": 60},
    }
    proc = start(str(write(tmp_path, {"entrypoint": "launch_jobs:exit_code"}, [{"id": "slow", "worker": slow}])))
    log = tmp_path / "n0" / "logs" / "slow-0-0.log"
    deadline = time.monotonic() + 30
    while "sleeping" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "teardown complete" in err


def test_named_actors_are_one_name_across_the_hosts_of_a_launch(tmp_path: Path) -> None:
    """The launch's name service on one machine: an actor on n0 spawns a named child, an actor on n1 finds it,
    cannot take its name, gets it with get_if_exists; namespaces; a killed holder's name is taken again."""
    pools = [{"id": "c", "cells": 2, "strategy": "SPREAD", "worker": COUNTER}]
    result = cli(str(write(tmp_path, {"entrypoint": "launch_jobs:names_across"}, pools)))
    assert result.returncode == 0, result.stderr[-3000:]
    check_names_across(result.stdout, ["n0", "n1"])


def test_a_command_job_shares_the_launch_names(tmp_path: Path) -> None:
    """A command job gets MILES_NAME_SERVICE: it finds the cells by name, and what it names, the cells find."""
    script = (
        "from runtime import get_actor, spawn\n"
        "print('CELL', get_actor('c-0-0').add(1).result(10))\n"
        "mine = spawn('launch_actors:Counter', kwargs={'start': 40}, name='from-job')\n"
        "print('BACK', get_actor('c-0-0').add_on_named('from-job', 2).result(30))\n"
        "mine.kill()\n"
    )
    pools = [{"id": "c", "cells": 1, "worker": COUNTER}]
    result = cli(str(write(tmp_path, {"command": [PYTHON, "-c", script]}, pools)))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "CELL 1" in result.stdout and "BACK 42" in result.stdout


DRIVER = """
import json
from runtime.ray_compat.as_ray import install_as_ray

install_as_ray()
import ray
import helper  # beside this script: the job's code, on every host's path

@ray.remote(num_gpus=1)
class Where:
    def where(self):
        import os
        return [os.environ.get("MILES_HOST"), os.environ.get("CUDA_VISIBLE_DEVICES"), helper.NAME]

context = ray.init(address="auto")
hosts = [node["NodeManagerHostname"] for node in ray.nodes()]
placed = [Where.options(scheduling_strategy="SPREAD").remote() for _ in range(2)]
print("DRIVER " + json.dumps({"context": context["address"], "hosts": hosts,
                               "where": sorted(ray.get([p.where.remote() for p in placed]))}), flush=True)
"""


def test_driver_runs_a_ray_script_as_the_job_over_the_launchs_hosts(tmp_path: Path) -> None:
    """``miles-launch hosts.toml --driver script.py``: no [job] needed; the script's ``ray.init(address="auto")``
    joins the launch, its actors spread over both hosts with a GPU each, and its directory is the job's code."""
    data = {
        "launcher": {"workdir": str(tmp_path / "run"), "stop_grace_s": 2, "gpu_check": False},
        "hosts": [local_host("n0", tmp_path / "n0", gpus=1), local_host("n1", tmp_path / "n1", gpus=1)],
        "pools": [{"id": "c", "worker": COUNTER, "hosts": ["n0"]}],
    }
    config = tmp_path / "hosts.toml"
    config.write_text(toml_text.dump(data))
    code = tmp_path / "job"
    code.mkdir()
    (code / "driver.py").write_text(DRIVER)
    (code / "helper.py").write_text('NAME = "helper from the driver\'s directory"\n')
    result = cli(str(config), "--driver", str(code / "driver.py"))
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.split("DRIVER ", 1)[1].splitlines()[0])
    assert out["context"] == "auto" and out["hosts"] == ["n0", "n1"]
    assert out["where"] == [[host, "0", "helper from the driver's directory"] for host in ("n0", "n1")]
    missing = cli(str(config), "--driver", str(tmp_path / "nope.py"))
    assert missing.returncode == 2 and f"--driver {tmp_path / 'nope.py'}: no such file" in missing.stderr
