"""``miles-launch logs hosts.toml POOL[-CELL[-WORKER]]``: a worker's log file, read on its host."""

from __future__ import annotations

import shlex
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from launcher.config.hosts_config import ClusterConfig, HostConfig
from launcher.config.placement import plan_placement
from launcher.errors import ConfigError
from launcher.launch.launch_state import read_state, state_path_for

Write = Callable[[str], None]


@dataclass(frozen=True)
class WorkerLog:
    """Where one worker's log file is."""

    worker_id: str
    host: HostConfig
    path: str


def find_logs(config: ClusterConfig, target: str) -> list[WorkerLog]:
    """The log files of a pool, a cell (``pool-N``) or a worker (``pool-N-M``); ConfigError naming the choices."""
    recorded: dict[str, str] = {}
    state = read_state(state_path_for(config)) or {}
    for entry in state.get("hosts", {}).values():
        for wid, worker in entry.get("workers", {}).items():
            if worker.get("log_path"):
                recorded[wid] = str(worker["log_path"])
    found = []
    workers = plan_placement(config.hosts, config.pools).workers()
    for placement in workers:
        wid = placement.worker_id
        if target in (placement.pool_id, placement.cell_id, wid):
            host = config.host(placement.host)
            found.append(WorkerLog(wid, host, recorded.get(wid, str(host.workdir / "logs" / f"{wid}.log"))))
    if not found:
        choices = sorted({p.pool_id for p in workers} | {p.cell_id for p in workers})
        raise ConfigError(f"no pool, cell or worker {target!r} in {config.source}; choose one of {choices}")
    return found


def print_logs(
    config: ClusterConfig, target: str, *, lines: int = 50, follow: bool = False, write: Write | None = None
) -> None:
    """Print the last ``lines`` lines of each log (with a header per worker); ``follow`` until interrupted.

    Every worker's output goes whole to ``{host workdir}/logs/{worker id}.log`` on its host (the console shows
    only warnings and errors by default); this reads those files locally or over SSH, during a launch or after it
    ended (the paths follow from hosts.toml's plan)."""
    out = write or _stdout
    logs = find_logs(config, target)
    if not follow:
        for log in logs:
            out(f"==> {log.worker_id} on {log.host.name}: {log.path} <==")
            for line in _tail(config, log, lines, follow=False):
                out(line)
        return
    prefix = len(logs) > 1
    threads = [
        threading.Thread(target=_follow, args=(config, log, lines, out, prefix), daemon=True, name=log.worker_id)
        for log in logs
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(timeout=0.5)  # wakes up for Ctrl-C


def _follow(config: ClusterConfig, log: WorkerLog, lines: int, out: Write, prefix: bool) -> None:
    for line in _tail(config, log, lines, follow=True):
        out(f"({log.worker_id}) {line}" if prefix else line)


def _tail(config: ClusterConfig, log: WorkerLog, lines: int, *, follow: bool) -> Iterator[str]:
    """Lines of ``tail -n`` (``-F`` when following) run where the file is, as they come."""
    argv = ["tail", "-n", str(max(0, lines)), *(["-F"] if follow else []), log.path]
    if log.host.provider == "local":
        yield from _local(argv)
    elif log.host.provider == "slurm":  # an srun step on the node, in the allocation this process runs in
        from launcher.hosts.slurm_commands import step_argv

        yield from _local([*step_argv(log.host.name, name="miles-logs"), "bash", "-c", _in_workdir(log, argv)])
    else:
        yield from _remote(config, argv, log, follow=follow)


def _in_workdir(log: WorkerLog, argv: list[str]) -> str:
    """The shell command of ``argv`` where relative paths resolve as the host agent resolved them."""
    return f"cd {shlex.quote(str(log.host.workdir))} 2>/dev/null; {shlex.join(argv)} 2>&1"


def _local(argv: list[str]) -> Iterator[str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            yield line.rstrip("\n")
    finally:
        proc.kill()
        proc.wait(timeout=5)


def _remote(config: ClusterConfig, argv: list[str], log: WorkerLog, *, follow: bool) -> Iterator[str]:
    from launcher.hosts.ssh_remote import ssh_connect

    client = ssh_connect(log.host, config.launcher.connect_timeout_s)
    try:
        _stdin, stdout, _stderr = client.exec_command(_in_workdir(log, argv), timeout=None if follow else 60)
        for line in stdout:
            yield line.rstrip("\n")
    finally:
        client.close()


def _stdout(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
