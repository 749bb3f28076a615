"""Host agent: one per host, spawns and supervises that host's processes; ``python -m launcher.host_agent``.

It reads JSON-line commands on stdin and writes JSON-line events on stdout (see ``agent_protocol``). Every child
gets its own session/process group, PR_SET_PDEATHSIG(SIGKILL) on Linux, and a log file ``{workdir}/logs/{id}.log``;
its output is streamed back prefixed ``(worker-id pid=N host=H)``. The agent is a child subreaper, tracks each
child's descendants with psutil, and kills every tree (SIGTERM, grace, SIGKILL) when stdin hits EOF, heartbeats
stop for ``--heartbeat-timeout`` seconds, it gets SIGTERM/SIGHUP/SIGINT, or the launcher sends ``shutdown``; then
it deletes the CURVE key directories the launcher gave it (``curve_keys``). Children die with it even when it is
killed with SIGKILL (PDEATHSIG). ``python -m runtime.worker`` children are forked by the agent's fork server
(``launcher.zygote``, driven by ``launcher.zygote_client``) and re-parented to the agent, with the same supervision.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import platform
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

import psutil

from launcher import agent_protocol as proto
from launcher.log_filter import ConsoleLogFilter
from launcher.process_tree import ProcessTree, terminate_trees
from launcher.readiness import free_ports, wait_ready
from launcher.zygote_client import READY_WAIT_S, ForkedWorker, ZygoteClient
from transport import shared_memory

log = logging.getLogger("launcher.host_agent")

PR_SET_CHILD_SUBREAPER = 36
_MAX_LINE = 64 * 1024
HEARTBEAT_INTERVAL_S = 1.0  # agent -> launcher
PROC_MARKER = "MILES_AGENT_PROC"  # env var naming the worker a process descends from (survives double forks)
_EOF = object()
_KEY_DIR_RE = re.compile(r"^" + re.escape(proto.CURVE_DIR_PREFIX) + r"[A-Za-z0-9_.-]+$")
_KEY_FILE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class EventWriter:
    """Serialized JSON-line writer on the agent's stdout; a broken pipe means the launcher is gone."""

    def __init__(self, stream: BinaryIO, on_broken: Any) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._on_broken = on_broken

    def emit(self, ev: str, **fields: Any) -> None:
        data = proto.encode({"ev": ev, **fields})
        with self._lock:
            try:
                self._stream.write(data)
                self._stream.flush()
            except (OSError, ValueError):
                self._on_broken("stdout closed")


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


class HostAgent:
    """The agent's state and main loop (commands are handled on the main thread, which forks every child)."""

    def __init__(self, host: str, workdir: Path, heartbeat_timeout_s: float, orphan_grace_s: float) -> None:
        self.host = host
        self.workdir = workdir
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.orphan_grace_s = orphan_grace_s
        self.out = EventWriter(sys.stdout.buffer, self._stop)
        self.procs: dict[str, Managed] = {}
        self.handed_ports: set[int] = set()
        self.commands: queue.Queue[Any] = queue.Queue()
        self.stop_reason: str | None = None
        self.key_dirs: list[Path] = []  # CURVE key directories written for the launcher; removed on exit
        # A spawn may wait for a starting zygote, blocking heartbeats: well under the launcher's patience.
        wait_s = min(READY_WAIT_S, heartbeat_timeout_s / 3) if heartbeat_timeout_s > 0 else READY_WAIT_S
        self.zygote = ZygoteClient(os.getpid(), ready_wait_s=wait_s)

    def _stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason

    def run(self) -> int:
        """Serve until EOF, heartbeat loss, a signal or ``shutdown``; always kills every tree on the way out."""
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, lambda signum, _frame: self._stop(f"signal {signal.Signals(signum).name}"))
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        threading.Thread(target=self._read_stdin, name="agent-stdin", daemon=True).start()
        self.out.emit(
            proto.EV_HELLO,
            host=self.host,
            pid=os.getpid(),
            hostname=socket.gethostname(),
            python=platform.python_version(),
            executable=sys.executable,
            package_version=_package_version(),
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        )
        self.zygote.start()  # imports in the background; the first runtime.worker spawn waits for it (bounded)
        last_heard = time.monotonic()
        next_scan = next_beat = 0.0
        grace = self.orphan_grace_s
        while self.stop_reason is None:
            try:
                command = self.commands.get(timeout=0.2)
            except queue.Empty:
                command = None
            now = time.monotonic()
            if command is _EOF:
                self._stop("stdin closed (launcher gone)")
                break
            if command is not None:
                last_heard = now
                if command.get("op") == proto.OP_SHUTDOWN:
                    grace = float(command.get("grace_s", grace))
                    self._stop("shutdown requested")
                    break
                self._handle(command)
            if self.heartbeat_timeout_s > 0 and now - last_heard > self.heartbeat_timeout_s:
                self._stop(f"no heartbeat for {self.heartbeat_timeout_s:g}s")
            if now >= next_scan:
                next_scan = now + 1.0
                self._scan()
            if now >= next_beat:  # lets the launcher notice a partition too
                next_beat = now + HEARTBEAT_INTERVAL_S
                self.out.emit(proto.EV_HEARTBEAT)
        log.warning("host agent %s stopping: %s", self.host, self.stop_reason)
        self.zygote.close()
        self._kill_all(grace)
        self._remove_keys()
        self.out.emit(proto.EV_BYE, reason=self.stop_reason)
        return 0

    def _read_stdin(self) -> None:
        for raw in iter(sys.stdin.buffer.readline, b""):
            if not raw.strip():
                continue
            try:
                self.commands.put(proto.decode(raw))
            except ValueError as exc:
                self.out.emit(proto.EV_ERROR, error=f"bad command line: {exc}")
        self.commands.put(_EOF)

    def _handle(self, command: dict[str, Any]) -> None:
        op, req = command.get("op"), command.get("req")
        try:
            if op == proto.OP_HEARTBEAT:
                return
            if op == proto.OP_SPAWN:
                self._spawn(command)
            elif op == proto.OP_KILL:
                self._kill(command)
            elif op == proto.OP_LIST:
                self.out.emit(proto.EV_LISTING, req=req, procs=[self._describe(m) for m in self.procs.values()])
            elif op == proto.OP_CURVE_KEYS:
                self.out.emit(proto.EV_CURVE_KEYS, req=req, path=str(self._write_keys(command)))
            elif op == proto.OP_PORTS:
                self.out.emit(proto.EV_PORTS, req=req, ports=free_ports(int(command.get("n", 1)), self.handed_ports))
            else:
                self.out.emit(proto.EV_ERROR, req=req, error=f"unknown op {op!r}")
        except (KeyError, TypeError, ValueError) as exc:
            self.out.emit(proto.EV_ERROR, req=req, error=f"bad {op} command: {exc!r}")
        except OSError as exc:
            self.out.emit(proto.EV_ERROR, req=req, error=f"{op} failed on host {self.host}: {exc}")

    def _spawn(self, command: dict[str, Any]) -> None:
        wid, req = str(command["id"]), command.get("req")
        if wid in self.procs and not self.procs[wid].exited.is_set():
            self.out.emit(proto.EV_SPAWN_FAILED, req=req, id=wid, error=f"{wid} is already running")
            return
        argv = [str(a) for a in command["argv"]]
        env = {**os.environ, **{str(k): str(v) for k, v in (command.get("env") or {}).items()}, PROC_MARKER: wid}
        cwd = Path(command.get("cwd") or self.workdir)
        log_path = self.workdir / "logs" / f"{wid}.log"
        try:
            cwd.mkdir(parents=True, exist_ok=True)
            popen = self.zygote.launch(argv, env, cwd, stdin=bool(command.get("stdin")))
        except OSError as exc:
            self.out.emit(proto.EV_SPAWN_FAILED, req=req, id=wid, error=f"cannot start {argv[0]!r}: {exc}")
            return
        _hand_over_stdin(popen, str(command.get("stdin") or ""))
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
            ready_spec=dict(command.get("ready") or {"kind": "none"}),
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
                args=(managed, stream_name, pipe, ConsoleLogFilter(str(command.get("stream_logs", "warnings")))),
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

    def _kill(self, command: dict[str, Any]) -> None:
        wid, req, grace = str(command["id"]), command.get("req"), float(command.get("grace_s", 10.0))
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

    def _kill_all(self, grace_s: float) -> None:
        trees = [m.tree for m in self.procs.values()]
        with contextlib.suppress(psutil.Error):  # everything reparented to us (subreaper) goes too
            trees += [ProcessTree(p.pid) for p in psutil.Process().children(recursive=True)]
        terminate_trees(trees, grace_s=grace_s)
        for managed in self.procs.values():
            managed.reported.wait(timeout=3.0)

    def _scan(self) -> None:
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

    def _write_keys(self, command: dict[str, Any]) -> Path:
        """Write the cluster's CURVE key files into WORKDIR/dir (0700; each file 0600 from its first byte)."""
        name, files = str(command["dir"]), command["files"]
        if not _KEY_DIR_RE.match(name):
            raise ValueError(f"key directory {name!r} must match {_KEY_DIR_RE.pattern}")
        if not isinstance(files, dict) or not files:
            raise ValueError("files must be a non-empty mapping of file name to text")
        for file_name, text in files.items():
            if not _KEY_FILE_RE.match(str(file_name)) or not isinstance(text, str):
                raise ValueError(f"bad key file {file_name!r}: a plain file name and its text")
        directory = self.workdir / name
        if directory.is_symlink():
            raise ValueError(f"{directory} is a symlink; refusing to write keys through it")
        self.workdir.mkdir(parents=True, exist_ok=True)
        directory.mkdir(mode=0o700, exist_ok=True)
        if directory not in self.key_dirs:
            self.key_dirs.append(directory)
        os.chmod(directory, 0o700)
        for file_name, text in files.items():
            tmp = directory / f".{file_name}.tmp"
            tmp.unlink(missing_ok=True)
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            try:
                os.fchmod(fd, 0o600)  # whatever the umask
                os.write(fd, text.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, directory / file_name)
        return directory.resolve()

    def _remove_keys(self) -> None:
        for directory in self.key_dirs:
            shutil.rmtree(directory, ignore_errors=True)
            if directory.exists():
                log.warning("could not remove the CURVE key directory %s", directory)

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

    def _describe(self, managed: Managed) -> dict[str, Any]:
        return {
            "id": managed.id,
            "pid": managed.popen.pid,
            "alive": not managed.exited.is_set(),
            "ready": managed.ready.is_set(),
            "returncode": managed.popen.returncode,
            "log_path": str(managed.log_path),
        }


def _package_version() -> str | None:
    try:
        return metadata.version(proto.PACKAGE_NAME)
    except metadata.PackageNotFoundError:
        return None


def _hand_over_stdin(popen: subprocess.Popen[bytes] | ForkedWorker, text: str) -> None:
    """Write ``text`` (a worker's spawn token line) to the child's stdin and close it; it is never logged."""
    if popen.stdin is None:
        return
    try:
        popen.stdin.write(text.encode())
        popen.stdin.close()
    except OSError:  # it died at once: its exit is reported as any other
        pass


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point of ``python -m launcher.host_agent``."""
    parser = argparse.ArgumentParser(prog="python -m launcher.host_agent", description=__doc__)
    parser.add_argument("--host", required=True, help="host name from hosts.toml (used in log prefixes)")
    parser.add_argument("--workdir", required=True, type=Path, help="logs go to WORKDIR/logs")
    parser.add_argument("--heartbeat-timeout", type=float, default=15.0, help="0 disables")
    parser.add_argument("--orphan-grace", type=float, default=3.0, help="SIGTERM->SIGKILL when the launcher is gone")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=f"[agent {args.host}] %(message)s")
    agent = HostAgent(args.host, args.workdir, args.heartbeat_timeout, args.orphan_grace)
    code = agent.run()
    # The stdin reader thread may be blocked in readline: skip interpreter teardown (nothing left to flush).
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
