"""``miles-launch status`` / ``down``: inspect or stop a launch from its state file, on every host."""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from launcher.agent.process_tree import ProcessTree, terminate_trees
from launcher.config.hosts_config import ClusterConfig, HostConfig
from launcher.console.text_columns import aligned
from launcher.launch.curve_keys import remove_keys, sweep_stale
from launcher.launch.launch_phase import ago, duration
from launcher.launch.launch_state import process_alive, read_state, state_path_for

log = logging.getLogger(__name__)

# Runs on a remote host with its Python (psutil is a dependency of miles-actors): argv[1] = "probe" | "kill",
# argv[2] = JSON {pid: create_time}, argv[3] = grace, argv[4] = a CURVE key directory to remove on kill ("": none);
# prints JSON {pid: alive}.
_REMOTE = """
import json, shutil, sys, time, psutil
mode, wanted = sys.argv[1], {int(k): v for k, v in json.loads(sys.argv[2]).items()}
def same(pid, ct):
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and (ct is None or abs(p.create_time() - ct) < 0.01)
    except psutil.Error:
        return False
def gone(p):  # a zombie is gone too (its parent may be stopped and unable to reap it)
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True
def settle(procs, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline and not all(gone(p) for p in procs):
        time.sleep(0.05)
if mode == "kill":
    tree = []
    for p in [psutil.Process(pid) for pid, ct in wanted.items() if same(pid, ct)]:
        try:
            tree += [p] + p.children(recursive=True)
        except psutil.Error:
            pass
    for sig in ("terminate", "kill"):
        for p in tree:
            if not gone(p):
                try:
                    getattr(p, sig)()
                except psutil.Error:
                    pass
        settle(tree, float(sys.argv[3]) if sig == "terminate" else 5.0)
    if len(sys.argv) > 4 and sys.argv[4]:
        shutil.rmtree(sys.argv[4], ignore_errors=True)
print(json.dumps({pid: same(pid, ct) for pid, ct in wanted.items()}))
"""


def _host_pids(entry: dict[str, Any]) -> dict[int, float | None]:
    pids: dict[int, float | None] = {}
    for worker in entry.get("workers", {}).values():
        if worker.get("pid") is not None:
            pids[int(worker["pid"])] = worker.get("create_time")
    return pids


def _on_host(
    host: HostConfig,
    mode: str,
    pids: dict[int, float | None],
    grace_s: float,
    timeout_s: float,
    key_dir: str | None = None,
) -> dict:
    """Probe or kill pids on a host (and, on kill, remove the launch's CURVE keys there): locally for local hosts,
    in an srun step on Slurm nodes, over SSH otherwise."""
    if not pids and not (mode == "kill" and key_dir):
        return {}
    if host.provider == "local":
        if mode == "kill":
            trees = [ProcessTree(pid, ct) for pid, ct in pids.items() if process_alive(pid, ct)]
            terminate_trees(trees, grace_s)
            remove_keys(key_dir)
        return {str(pid): process_alive(pid, ct) for pid, ct in pids.items()}
    argv = [host.python, "-c", _REMOTE, mode, json.dumps(pids), str(grace_s), key_dir or ""]
    if host.provider == "slurm":  # a step on the node, in the allocation this process runs in
        from launcher.hosts.slurm_commands import run_tool, step_argv

        out = run_tool([*step_argv(host.name, name=f"miles-{mode}"), *argv], timeout_s=timeout_s + grace_s + 10)
        return json.loads(out.strip().splitlines()[-1])
    from launcher.hosts.ssh_remote import run_remote, ssh_connect

    client = ssh_connect(host, timeout_s)
    try:
        code, out, err = run_remote(client, shlex.join(argv), timeout_s + grace_s + 10)
        if code != 0:
            raise OSError(f"host {host.name!r}: {mode} failed (exit {code}): {err.strip()[-300:]}")
        return json.loads(out.strip().splitlines()[-1])
    finally:
        client.close()


def launch_status(config: ClusterConfig) -> dict[str, Any]:
    """{'running': bool, 'launcher_pid', 'hosts': {name: {worker_id: {pid, alive}}}} from the state file."""
    state = read_state(state_path_for(config))
    if state is None:
        return {"running": False, "launcher_pid": None, "hosts": {}}
    launcher = state.get("launcher", {})
    report: dict[str, Any] = {
        "running": process_alive(launcher.get("pid"), launcher.get("create_time")),
        "launcher_pid": launcher.get("pid"),
        "launch": _launch_times(state.get("launch") or {}),
        "hosts": {},
    }
    for name, entry in state.get("hosts", {}).items():
        try:
            alive = _on_host(config.host(name), "probe", _host_pids(entry), 0, config.launcher.connect_timeout_s)
        except Exception as exc:
            report["hosts"][name] = {"error": str(exc)}
            continue
        report["hosts"][name] = {
            wid: _worker_status(w, bool(alive.get(str(w.get("pid"))))) for wid, w in entry.get("workers", {}).items()
        }
    return report


def _launch_times(record: dict[str, Any]) -> dict[str, Any]:
    """The launch's phase (launcher/launch/launch_phase.py) with how long ago each of its times was."""
    return {
        "phase": record.get("phase"),
        "phase_s": ago(record, "phase_since"),
        "elapsed_s": ago(record, "started_at"),
        "job_elapsed_s": ago(record, "job_started_at"),
        "last_output_s": ago(record, "last_output_at"),
    }


def _worker_status(worker: dict[str, Any], alive: bool) -> dict[str, Any]:
    created = worker.get("create_time")
    return {
        "pid": worker.get("pid"),
        "alive": alive,
        "pool": worker.get("pool"),
        "cell": worker.get("cell"),
        "state": worker.get("state") if alive else "exited",
        "uptime_s": round(time.time() - created, 1) if alive and created else None,
        "restarts": worker.get("restarts", 0),
        "last_error": worker.get("last_error"),
    }


STATUS_COLUMNS = ("HOST", "POOL", "CELL", "WORKER", "PID", "STATE", "UPTIME", "RESTARTS", "LAST ERROR")


def status_table(report: dict[str, Any]) -> str:
    """``miles-launch status`` for people: the launcher line, then one row per worker."""
    if not report["hosts"] and not report["running"]:
        return "no launch of this config is running"
    head = f"launcher pid {report['launcher_pid']}: {'running' if report['running'] else 'NOT running'}"
    launch = report.get("launch") or {}
    if report["running"] and launch.get("phase"):
        up = duration(launch["elapsed_s"] or 0)
        head += f"; {launch['phase']} for {duration(launch['phase_s'] or 0)} (launch up {up})"
        if launch.get("job_elapsed_s") is not None:
            last = launch.get("last_output_s")
            head += f"; job output {duration(last)} ago" if last is not None else "; no job output yet"
    rows = [STATUS_COLUMNS]
    for host, workers in report["hosts"].items():
        if "error" in workers:
            rows.append((host, "-", "-", "-", "-", "unreachable", "-", "-", str(workers["error"])))
            continue
        for wid, w in workers.items():
            uptime = duration(w["uptime_s"]) if w.get("uptime_s") is not None else "-"
            error = (w.get("last_error") or "-").replace("\n", " ")
            row = (host, w.get("pool") or "-", w.get("cell") or "-", wid, str(w.get("pid")), str(w.get("state")))
            rows.append((*row, uptime, str(w.get("restarts", 0)), error[:100]))
    return "\n".join([head, *aligned(rows)])


def launch_down(config: ClusterConfig, *, timeout_s: float = 60.0) -> list[str]:
    """Stop a launch: SIGTERM the launcher (it tears down), then kill leftovers on every host; returns messages."""
    path = state_path_for(config)
    state = read_state(path)
    if state is None:
        return [f"no launch state at {path}: nothing to stop"]
    messages = []
    launcher = state.get("launcher", {})
    pid, created = launcher.get("pid"), launcher.get("create_time")
    if process_alive(pid, created) and pid != os.getpid():
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while process_alive(pid, created) and time.monotonic() < deadline:
            time.sleep(0.1)
        messages.append(f"launcher pid {pid} {'stopped' if not process_alive(pid, created) else 'did NOT stop'}")
    state = read_state(path) or state  # the launcher may have removed it after a clean teardown
    grace = config.launcher.stop_grace_s

    def down_host(name: str, entry: dict[str, Any]) -> str:
        pids = _host_pids(entry)
        try:
            left = _on_host(
                config.host(name), "kill", pids, grace, config.launcher.connect_timeout_s, entry.get("curve_dir")
            )
        except Exception as exc:
            return f"host {name}: could not check/kill pids {sorted(pids)}: {exc}"
        still = [p for p, alive in left.items() if alive]
        gone = f"host {name}: {len(pids) - len(still)}/{len(pids)} worker process(es) gone"
        return gone + (f", STILL ALIVE: {still}" if still else "")

    hosts = list(state.get("hosts", {}).items())
    with ThreadPoolExecutor(max_workers=max(1, len(hosts)), thread_name_prefix="down") as pool:
        messages += list(pool.map(lambda item: down_host(*item), hosts))
    path.unlink(missing_ok=True)
    sweep_stale(Path(config.launcher.workdir))  # the dead launcher's own copy of the keys
    return messages
