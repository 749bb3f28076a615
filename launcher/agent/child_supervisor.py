"""The host agent's children: spawned (through the fork server or Popen), logged, probed for readiness, killed.

Kept apart from the agent's command loop so that a child's whole life, and its process tree, is handled in one place.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import psutil

from launcher.agent import agent_protocol as proto
from launcher.agent.agent_commands import Kill, Spawn
from launcher.agent.agent_events import EventWriter
from launcher.agent.code_cache import with_python_path
from launcher.agent.process_tree import ProcessTree, terminate_trees
from launcher.agent.readiness import wait_ready
from launcher.agent.zygote_client import ZygoteClient
from launcher.console.log_filter import ConsoleLogFilter
from runtime.internals import ForkedWorker
from transport import shared_memory

PROC_MARKER = "MILES_AGENT_PROC"  # env var naming the worker a process descends from (survives double forks)
_MAX_LINE = 64 * 1024


@dataclass
class Managed:
    """One supervised child."""

    id: str
    popen: subprocess.Popen[bytes] | ForkedWorker
    tree: ProcessTree
    prefix: str
    log_path: Path
    log_file: BinaryIO
    ready_spec: dict[str, Any]
    ready: threading.Event = field(default_factory=threading.Event)
    exited: threading.Event = field(default_factory=threading.Event)  # the main process is gone
    reported: threading.Event = field(default_factory=threading.Event)  # ... and its exited event is sent
    readers: list[threading.Thread] = field(default_factory=list)
    log_lock: threading.Lock = field(default_factory=threading.Lock)


class ChildSupervisor:
    """The children of one host agent, by worker id; their events go to ``out``.

    Each child's descendants are tracked with psutil and a tree is killed as a whole (SIGTERM, grace, SIGKILL).
    Spawns happen on the agent's main thread; readers, probes and waits on threads of their own."""

    def __init__(self, host: str, workdir: Path, out: EventWriter, zygote: ZygoteClient) -> None:
        self.host = host
        self.workdir = workdir
        self.out = out
        self.zygote = zygote
        self.procs: dict[str, Managed] = {}

    def spawn(self, command: Spawn, req: int | None) -> None:
        """Start the child of a ``spawn`` command and report it (spawned, then ready as its check says)."""
        wid = command.id
        if wid in self.procs and not self.procs[wid].exited.is_set():
            self.out.emit(proto.EV_SPAWN_FAILED, req=req, id=wid, error=f"{wid} is already running")
            return
        argv = command.argv
        env = {**os.environ, **command.env, PROC_MARKER: wid}
        with_python_path(env, command.python_path)  # the job's code first on its sys.path
        cwd = Path(command.cwd or self.workdir)
        log_path = self.workdir / "logs" / f"{wid}.log"
        try:
            cwd.mkdir(parents=True, exist_ok=True)
            # Its own session/process group and PR_SET_PDEATHSIG(SIGKILL) on Linux: it dies with the agent.
            popen = self.zygote.launch(argv, env, cwd, stdin=bool(command.stdin))
        except OSError as exc:
            self.out.emit(proto.EV_SPAWN_FAILED, req=req, id=wid, error=f"cannot start {argv[0]!r}: {exc}")
            return
        _hand_over_stdin(popen, command.stdin or "")
        log_file = open(log_path, "ab")
        forked = isinstance(popen, ForkedWorker)
        how = " (forked by the zygote)" if forked else ""
        log_file.write(f"==== {time.strftime('%Y-%m-%d %H:%M:%S')} start pid={popen.pid}{how}: {argv}\n".encode())
        managed = Managed(
            id=wid,
            popen=popen,
            tree=ProcessTree(popen.pid),
            prefix=f"({wid} pid={popen.pid} host={self.host})",
            log_path=log_path,
            log_file=log_file,
            ready_spec=dict(command.ready),
        )
        self.procs[wid] = managed
        # Before the readers start: a forked worker can print its ready line at once, and the launcher must hear
        # of the worker before it hears that it is ready.
        self.out.emit(
            proto.EV_SPAWNED,
            req=req,
            id=wid,
            pid=popen.pid,
            create_time=managed.tree.create_time,
            log_path=str(log_path),
            zygote=forked,
        )
        for stream_name, pipe in (("stdout", popen.stdout), ("stderr", popen.stderr)):
            reader = threading.Thread(
                target=self._pump,
                args=(managed, stream_name, pipe, ConsoleLogFilter(command.stream_logs)),
                name=f"pump-{wid}-{stream_name}",
                daemon=True,
            )
            reader.start()
            managed.readers.append(reader)
        threading.Thread(target=self._wait, args=(managed,), name=f"wait-{wid}", daemon=True).start()
        kind = managed.ready_spec.get("kind", "none")
        if kind == "none":
            managed.ready.set()
            self.out.emit(proto.EV_READY, id=wid)
        elif kind in ("tcp", "http"):
            threading.Thread(target=self._probe, args=(managed,), name=f"ready-{wid}", daemon=True).start()

    def _pump(self, managed: Managed, stream_name: str, pipe: BinaryIO, console: ConsoleLogFilter) -> None:
        spec = managed.ready_spec
        prefix = spec.get("prefix") if spec.get("kind") == "line" else None
        console.ready_prefix = prefix
        for raw in iter(pipe.readline, b""):
            with managed.log_lock:
                with contextlib.suppress(OSError, ValueError):
                    managed.log_file.write(raw if raw.endswith(b"\n") else raw + b"\n")
                    managed.log_file.flush()
            line = raw[:_MAX_LINE].decode(errors="replace").rstrip("\r\n")
            if prefix and stream_name == "stdout" and not managed.ready.is_set() and line.startswith(prefix):
                managed.ready.set()
                self.out.emit(proto.EV_READY, id=managed.id, line=line)
            if console.shows(line):
                self.out.emit(proto.EV_LOG, id=managed.id, stream=stream_name, text=f"{managed.prefix} {line}")
        pipe.close()

    def _probe(self, managed: Managed) -> None:
        spec = managed.ready_spec
        error = wait_ready(spec, stop=managed.exited)
        if managed.exited.is_set():
            return
        if error is None:
            managed.ready.set()
            self.out.emit(proto.EV_READY, id=managed.id)
        else:
            self.out.emit(proto.EV_NOT_READY, id=managed.id, error=error)

    def _wait(self, managed: Managed) -> None:
        returncode = managed.popen.wait()
        managed.exited.set()
        self._adopt_orphans()
        terminate_trees([managed.tree], grace_s=2.0)  # leftovers of a dead worker: no orphans
        shared_memory.remove_files_of(managed.popen.pid)  # an actor killed by a signal leaves its segment files
        for reader in managed.readers:
            reader.join(timeout=3.0)
        with managed.log_lock:
            with contextlib.suppress(OSError):
                managed.log_file.write(f"==== exited returncode={returncode}\n".encode())
                managed.log_file.close()
        sig = signal.Signals(-returncode).name if returncode < 0 and -returncode in signal.valid_signals() else None
        self.out.emit(proto.EV_EXITED, id=managed.id, pid=managed.popen.pid, returncode=returncode, signal=sig)
        managed.reported.set()

    def kill(self, command: Kill, req: int | None) -> None:
        """Kill the tree of a ``kill`` command's child (on a thread); ``killed`` once its exit is reported."""
        wid, grace = command.id, command.grace_s
        managed = self.procs.get(wid)
        if managed is None:
            self.out.emit(proto.EV_KILLED, req=req, id=wid, known=False)
            return

        def kill() -> None:
            self._adopt_orphans()
            terminate_trees([managed.tree], grace_s=grace)
            managed.reported.wait(timeout=grace + 8.0)
            self.out.emit(proto.EV_KILLED, req=req, id=wid, known=True)

        threading.Thread(target=kill, name=f"kill-{wid}", daemon=True).start()

    def kill_all(self, grace_s: float) -> None:
        """Kill every tree, and everything reparented to the agent; wait (bounded) for their exits to be sent."""
        trees = [m.tree for m in self.procs.values()]
        with contextlib.suppress(psutil.Error):  # everything reparented to us (subreaper) goes too
            trees += [ProcessTree(p.pid) for p in psutil.Process().children(recursive=True)]
        terminate_trees(trees, grace_s=grace_s)
        for managed in self.procs.values():
            managed.reported.wait(timeout=3.0)

    def scan(self) -> None:
        """Refresh descendant snapshots and reap orphans reparented to us that nobody waits for."""
        managed_pids = {m.popen.pid for m in self.procs.values()} | {self.zygote.pid}
        self._adopt_orphans()
        for managed in self.procs.values():
            if not managed.exited.is_set():
                managed.tree.refresh()
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process().children():
                if child.pid not in managed_pids and child.status() == psutil.STATUS_ZOMBIE:
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(child.pid, os.WNOHANG)

    def _adopt_orphans(self) -> None:
        """Give orphans reparented to us (we are a subreaper) back to the tree they came from (env marker)."""
        roots = {m.popen.pid for m in list(self.procs.values())}
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process().children():
                if child.pid in roots:
                    continue
                with contextlib.suppress(psutil.Error):
                    owner = self.procs.get(child.environ().get(PROC_MARKER, ""))
                    if owner is not None:
                        owner.tree.adopt(child.pid, child.create_time())

    def listing(self) -> list[dict[str, Any]]:
        """Every child as a ``list`` reply shows it."""
        return [
            {
                "id": managed.id,
                "pid": managed.popen.pid,
                "alive": not managed.exited.is_set(),
                "ready": managed.ready.is_set(),
                "returncode": managed.popen.returncode,
                "log_path": str(managed.log_path),
            }
            for managed in self.procs.values()
        ]


def _hand_over_stdin(popen: subprocess.Popen[bytes] | ForkedWorker, text: str) -> None:
    """Write ``text`` (a worker's spawn token line) to the child's stdin and close it; it is never logged."""
    if popen.stdin is None:
        return
    try:
        popen.stdin.write(text.encode())
        popen.stdin.close()
    except OSError:  # it died at once: its exit is reported as any other
        pass
